package dp

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/gorgonia-parallel/gp/nn"
)

// replica is one device's share of the work: its compiled programs (one per chunk size) and
// the state of the current step. All its fields are touched by the caller's goroutine
// between steps and by the replica's own goroutine during a run.
type replica struct {
	index int
	dev   Device
	progs map[int]Executor

	// The current step.
	lo, n int
	prog  Executor
	ctx   context.Context // read by checkStop, on the replica's goroutine
	loss  float32
}

// run scatters the replica's chunk into its program and runs it. A panic in an op is turned
// into an error so that one replica cannot take the process down.
func (r *replica) run(ctx context.Context, b Batch, per map[string]int) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
		}
	}()
	r.ctx = ctx
	defer func() { r.ctx = nil }()
	for name, k := range per {
		if err := r.prog.SetInput(name, b.Inputs[name][r.lo*k:(r.lo+r.n)*k]); err != nil {
			return err
		}
	}
	if err := r.prog.Run(ctx); err != nil {
		return err
	}
	r.loss = 0
	if r.prog.Compiled().Loss != nil {
		if r.loss, err = r.prog.LossValue(); err != nil {
			return err
		}
	}
	return nil
}

// checkStop is the replica's gradient hook: it ends the replica's backward at its next
// gradient once the step is cancelled (another replica failed, or the caller cancelled).
func (r *replica) checkStop(*nn.Param) error {
	if r.ctx == nil {
		return nil
	}
	return r.ctx.Err()
}

// fail wraps err as the failure of replica r.
func (r *replica) fail(err error, stopped []int) error {
	return &ReplicaError{Replica: r.index, Device: r.dev, Lo: r.lo, Hi: r.lo + r.n, Stopped: stopped, Err: err}
}
