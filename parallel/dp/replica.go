package dp

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/gorgonia-parallel/gp/nn"
)

// replica is one device's share of the work: its compiled programs (one per chunk size), its
// gradient buffer, and the state of the current step. All its fields are touched by the
// caller's goroutine between steps and by the replica's own goroutine during a run.
type replica struct {
	index int
	dev   Device
	progs map[int]*nn.Program
	grad  []float32

	// The current step.
	lo, n int
	prog  *nn.Program
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
	r.pullParams()
	for name, k := range per {
		dst, err := r.prog.Input(name)
		if err != nil {
			return err
		}
		copy(dst, b.Inputs[name][r.lo*k:(r.lo+r.n)*k])
	}
	if r.prog.Builder.Training() {
		clear(r.grad)
	}
	if err := r.prog.Run(ctx); err != nil {
		return err
	}
	r.loss = 0
	if r.prog.Loss != nil {
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

// pullParams makes the model's current parameters visible to the replica before it runs.
// CPU replicas bind the master's flat value buffer directly, so there is nothing to do; a GPU
// replica would copy (broadcast) the parameters into its device memory here, as PyTorch's
// replicate() does every step.
func (r *replica) pullParams() {}

// pushGrads makes the replica's gradients readable by the master's reduction. CPU replicas
// accumulate in host memory already; a GPU replica would copy its buffer back (or reduce on
// the device) here.
func (r *replica) pushGrads() {}

// fail wraps err as the failure of replica r.
func (r *replica) fail(err error, stopped []int) error {
	return &ReplicaError{Replica: r.index, Device: r.dev, Lo: r.lo, Hi: r.lo + r.n, Stopped: stopped, Err: err}
}
