package trainer

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Faults are crashes injected on purpose, for tests of a launcher's restarts and of resuming
// (the -fail-at-step and -kill-at-step flags of examples/imagenet). Each fires only in a
// job's first attempt (TORCHELASTIC_RESTART_COUNT unset or 0), so that the attempt the
// launcher restarts runs to the end. The zero Faults injects nothing.
type Faults struct {
	// FailAtStep makes every rank exit with status 3 right after that step (and its
	// checkpoint), as a crash would: no deferred cleanup, no abort of the group. 0 is off.
	FailAtStep int64
	// KillAtStep makes rank KillRank send itself SIGKILL in the middle of that step (after
	// its forward and backward, before the update, the step's log and its checkpoint): a
	// crash that runs no deferred code and closes no connection cleanly. 0 is off.
	KillAtStep int64
	KillRank   int
}

// Callback is the callback (WithCallback) that injects f's faults; false when f injects
// none.
func (f Faults) Callback() (Callback, bool) {
	var cb Callback
	if f.KillAtStep > 0 {
		kill, rank := f.KillAtStep, f.KillRank
		cb.BeforeUpdate = func(_ context.Context, s Step) error {
			if s.Rank == rank && s.Step == kill && firstAttempt() {
				killSelf(s.Rank, s.Step)
			}
			return nil
		}
	}
	if f.FailAtStep > 0 {
		fail := f.FailAtStep
		cb.OnStepEnd = func(_ context.Context, s Step) error {
			if s.Step == fail && firstAttempt() {
				fmt.Fprintf(os.Stderr, "trainer: rank %d: failing on purpose after step %d (-fail-at-step)\n", s.Rank, s.Step)
				os.Exit(3)
			}
			return nil
		}
	}
	return cb, f.KillAtStep > 0 || f.FailAtStep > 0
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
