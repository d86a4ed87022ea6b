package trainer

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Fault injection for the restart tests (-fail-at-step, -kill-at-step): each fires only in
// a job's first attempt, so that the attempt the launcher restarts runs to the end. The
// training loop knows only the hooks; what they do is here.

// faultHooks are the points of an optimizer step where a fault can be injected.
type faultHooks struct {
	// beforeUpdate runs after the forward and backward of step's last batch, before the
	// update (step is the step being run).
	beforeUpdate func(step int64)
	// afterStep runs once step is taken, logged and (-ckpt-every) checkpointed.
	afterStep func(step int64)
}

// faultsOf is the hooks that cfg's -kill-at-step and -fail-at-step ask of rank: no-ops
// without them.
func faultsOf(cfg *Config, rank int) faultHooks {
	h := faultHooks{beforeUpdate: func(int64) {}, afterStep: func(int64) {}}
	if cfg.KillAtStep > 0 && rank == cfg.KillRank {
		h.beforeUpdate = func(step int64) {
			if step == cfg.KillAtStep && firstAttempt() {
				killSelf(rank, step)
			}
		}
	}
	if cfg.FailAtStep > 0 {
		h.afterStep = func(step int64) {
			if step == cfg.FailAtStep && firstAttempt() {
				// As a crash would: no deferred cleanup, no abort of the group.
				fmt.Fprintf(os.Stderr, "trainer: rank %d: failing on purpose after step %d (-fail-at-step)\n", rank, step)
				os.Exit(3)
			}
		}
	}
	return h
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
