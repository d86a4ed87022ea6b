package trainer

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Fault injection for the restart tests (-fail-at-step, -kill-at-step), as a Callback:
// each fires only in a job's first attempt, so that the attempt the launcher restarts runs
// to the end.

// faults is the callback of c's -kill-at-step and -fail-at-step; false without them.
func (c *Config) faults() (Callback, bool) {
	var cb Callback
	if c.KillAtStep > 0 {
		kill, rank := c.KillAtStep, c.KillRank
		cb.BeforeUpdate = func(_ context.Context, s Step) error {
			if s.Rank == rank && s.Step == kill && firstAttempt() {
				killSelf(s.Rank, s.Step)
			}
			return nil
		}
	}
	if c.FailAtStep > 0 {
		fail := c.FailAtStep
		cb.OnStepEnd = func(_ context.Context, s Step) error {
			if s.Step == fail && firstAttempt() {
				// As a crash would: no deferred cleanup, no abort of the group.
				fmt.Fprintf(os.Stderr, "trainer: rank %d: failing on purpose after step %d (-fail-at-step)\n", s.Rank, s.Step)
				os.Exit(3)
			}
			return nil
		}
	}
	return cb, c.KillAtStep > 0 || c.FailAtStep > 0
}

// firstAttempt reports whether this is the first attempt of the job: the launcher's
// TORCHELASTIC_RESTART_COUNT is unset or 0.
func firstAttempt() bool {
	n, err := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT"))
	return err != nil || n <= 0
}

// killSelf sends this process SIGKILL during step (-kill-at-step). It does not return.
func killSelf(rank int, step int64) {
	fmt.Fprintf(os.Stderr, "trainer: rank %d: SIGKILL during step %d (-kill-at-step)\n", rank, step)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // SIGKILL on Unix
	}
	// Kill delivers the signal asynchronously; never run on past the chosen point.
	time.Sleep(time.Minute)
	os.Exit(137)
}
