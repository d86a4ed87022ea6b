//go:build !linux

package benchutil

// RunDelaySeconds is 0 where the kernel has no /proc/self/task/*/schedstat.
func RunDelaySeconds() float64 { return 0 }
