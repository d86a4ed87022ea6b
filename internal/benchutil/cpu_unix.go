//go:build unix

package benchutil

import (
	"syscall"
	"time"
)

// CPUSeconds is the user+system CPU time this process has used so far, every thread
// included.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
