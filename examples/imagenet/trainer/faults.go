package trainer

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Fault injection for the restart tests (-fail-at-step, -kill-at-step): each fires only in
// a job's first attempt, so that the attempt the launcher restarts runs to the end.

// firstAttempt reports whether this is the first attempt of the job: the launcher's
// TORCHELASTIC_RESTART_COUNT is unset or 0.
func firstAttempt() bool {
	n, err := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT"))
	return err != nil || n <= 0
}

// maybeKill sends this process SIGKILL when cfg.KillAtStep names step (the step being run)
// and cfg.KillRank this rank, in the job's first attempt. It does not return then.
func maybeKill(cfg *Config, rank int, step int64) {
	if cfg.KillAtStep <= 0 || step != cfg.KillAtStep || rank != cfg.KillRank || !firstAttempt() {
		return
	}
	fmt.Fprintf(os.Stderr, "trainer: rank %d: SIGKILL during step %d (-kill-at-step)\n", rank, step)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // SIGKILL on Unix
	}
	// Kill delivers the signal asynchronously; never run on past the chosen point.
	time.Sleep(time.Minute)
	os.Exit(137)
}
