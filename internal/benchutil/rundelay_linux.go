package benchutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RunDelaySeconds is the time this process's live threads have spent runnable but waiting
// for a CPU so far (the second field of each /proc/self/task/*/schedstat), in seconds; 0
// where the kernel has no schedstat. Threads that have exited no longer count, so take the
// difference of two calls around work whose threads outlive it. SCHED_IDLE threads (the
// runtime's monitor once lowered, see parallel/sysmon) do not count: they wait by design
// whenever the cores are busy.
func RunDelaySeconds() float64 {
	files, err := filepath.Glob("/proc/self/task/*/schedstat")
	if err != nil {
		return 0
	}
	var ns int64
	for _, f := range files {
		tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if a, err := unix.SchedGetAttr(tid, 0); err == nil && a.Policy == unix.SCHED_IDLE {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if fs := strings.Fields(string(b)); len(fs) >= 2 {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			ns += v
		}
	}
	return float64(ns) / 1e9
}
