package devzero

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
)

// Program is a model compiled for device ZeRO-3: train.Program's verbs. Run gathers the
// parameters, runs forward and backward on the device and leaves the rank's shard of the
// average gradient in the gradient shard; Step is the sharded AdamW (on the device, or on
// the CPU under WithOffloadCPU), then the gradients are zeroed. SetInput, Output and
// LossValue are the tape program's. A program built with nn.Training(false) gathers and
// runs forward with no reduction (still collective).
type Program struct {
	*tape.Program
	e        *Engine
	training bool
}

// Compile builds the model with build on the engine's working state (tape.State.Compile)
// with the gradient hook that reduce-scatters each complete unit.
func (e *Engine) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	all := append(append([]nn.BuildOption(nil), opts...), nn.WithGradHook(e.onGrad))
	tp, err := e.st.Compile(build, all...)
	if err != nil {
		return nil, fmt.Errorf("devzero: rank %d: compile: %w", e.rank, err)
	}
	return &Program{Program: tp, e: e, training: tp.CPU().Builder.Training() && tp.CPU().Loss != nil}, nil
}

// Run runs one step on this rank: on return the gradient shard holds (in stream order) this
// rank's shard of the average over the ranks of the gradients accumulated since the last
// Step or ZeroGrad.
func (p *Program) Run(ctx context.Context) error {
	e := p.e
	if err := e.gatherAll(ctx); err != nil {
		return errors.Join(err, e.waitGathers(ctx))
	}
	if !p.training {
		err := p.Program.Run(ctx)
		return errors.Join(err, e.waitGathers(ctx))
	}
	e.begin()
	runErr := p.Program.Run(ctx)
	return e.finish(ctx, runErr, false)
}

// RunStep is Run then Step, with each unit's shard updated by the device AdamW as soon as
// the compute stream has its reduced gradient, while later units still reduce (train's
// Overlapped); under WithOffloadCPU, and for an evaluation program, it is Run then Step.
func (p *Program) RunStep(ctx context.Context) error {
	e := p.e
	if !p.training || e.opt.offload {
		if err := p.Run(ctx); err != nil {
			return err
		}
		return p.Step(ctx)
	}
	if err := e.gatherAll(ctx); err != nil {
		return errors.Join(err, e.waitGathers(ctx))
	}
	e.begin()
	runErr := p.Program.Run(ctx)
	if err := e.finish(ctx, runErr, true); err != nil {
		return err
	}
	return e.ZeroGrad()
}

// Step applies the sharded optimizer, then zeroes the gradients.
func (p *Program) Step(ctx context.Context) error {
	if err := p.e.opt.step(ctx); err != nil {
		return fmt.Errorf("devzero: rank %d: optimizer step: %w", p.e.rank, err)
	}
	return p.e.ZeroGrad()
}

// ZeroGrad zeroes the gradients (a failure is the next Run's).
func (p *Program) ZeroGrad() { _ = p.e.ZeroGrad() }

func (e *Engine) begin() {
	n := len(e.model.Params.Params)
	if len(e.isReady) != n {
		e.isReady = make([]bool, n)
	}
	clear(e.isReady)
	e.pending = e.pending[:0]
	for _, u := range e.units {
		e.pending = append(e.pending, len(u.Params))
	}
	e.order = e.order[:0]
	e.rworks = make([]nccl.DeviceWork, len(e.units))
	e.hookErr = nil
}

// onGrad is the gradient hook: p's gradient has been added into the working buffer.
func (e *Engine) onGrad(p *nn.Param) error {
	if e.isReady[p.Index] {
		err := fmt.Errorf("devzero: rank %d: gradient of %s arrived twice in one Run", e.rank, p.Name)
		if e.hookErr == nil {
			e.hookErr = err
		}
		return err
	}
	e.isReady[p.Index] = true
	u := e.unitOf[p.Index]
	if e.pending[u]--; e.pending[u] == 0 {
		e.launch(u)
	}
	return nil
}

// launch reduce-scatters unit i's gradients into the rank's shard on the group's stream,
// after the compute stream's work so far. A failure is the unit's Work's.
func (e *Engine) launch(i int) {
	u := e.units[i]
	c, s := e.dev.Context(), e.dev.Stream()
	e.order = append(e.order, i)
	src := at(e.st.Grads(), u.Lo)
	if g := e.scratchG[i]; g != nil {
		if err := c.CopyDtoDAsync(g.Ptr(), src, 4*(u.Hi-u.Lo), s); err != nil {
			e.rworks[i] = failed(fmt.Errorf("unit %s to its padded buffer: %w", u.Name, err))
			return
		}
		src = g.Ptr()
	}
	if err := c.EventRecord(e.ready[i], s); err != nil {
		e.rworks[i] = failed(fmt.Errorf("recording unit %s's ready event: %w", u.Name, err))
		return
	}
	e.rworks[i] = e.coll.ReduceScatterDeviceAfter(at(e.shardG, u.ShardBase), src, u.Shard, libnccl.Float32, comm.Sum, e.ready[i], e.reduced[i])
}

// finish launches the units that got no gradient (their working gradients are zeros, or
// what earlier Runs accumulated: every rank issues the same collectives), makes the compute
// stream wait for each reduction and divide the unit's shard by the world size (and, under
// offload, copy it to pinned host memory; when ranged, step it with the device AdamW), then
// waits for the collectives and reports their errors.
func (e *Engine) finish(ctx context.Context, runErr error, ranged bool) error {
	errs := []error{runErr, e.hookErr}
	for i := range e.units {
		if e.pending[i] > 0 {
			e.pending[i] = 0
			e.launch(i)
		}
	}
	c, s := e.dev.Context(), e.dev.Stream()
	began := false
	for _, i := range e.order {
		u, w := e.units[i], e.rworks[i]
		select {
		case <-w.Enqueued():
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for unit %s's reduce-scatter to be enqueued: %w", u.Name, ctx.Err()))
		}
		if err := c.StreamWaitEvent(s, e.reduced[i]); err != nil {
			errs = append(errs, fmt.Errorf("waiting for unit %s's reduce-scatter: %w", u.Name, err))
		}
		if errors.Join(errs...) != nil {
			break
		}
		g, err := e.shardG.View(u.ShardBase, u.Shard)
		if err == nil && e.world > 1 {
			// As parallel/zero's: a power of two's reciprocal is exact, so this is the division.
			err = e.dev.Scale(g, g, 1/float32(e.world))
		}
		if err == nil {
			err = e.opt.gradArrived(u)
		}
		if err == nil && ranged {
			if !began {
				e.opt.begin()
				began = true
			}
			err = e.opt.stepRange(u.ShardBase, u.ShardBase+u.Shard)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("unit %s's gradient shard: %w", u.Name, err))
			break
		}
	}
	for _, i := range e.order {
		if err := e.rworks[i].Wait(ctx); err != nil {
			errs = append(errs, fmt.Errorf("reduce-scatter of unit %s: %w", e.units[i].Name, err))
		}
	}
	errs = append(errs, e.waitGathers(ctx))
	if err := errors.Join(errs...); err == nil && ranged && !began {
		// No unit (a model without parameters): a plain step.
		errs = append(errs, e.opt.step(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("devzero: rank %d: %w", e.rank, err)
	}
	return nil
}

// failedWork is a DeviceWork that failed before it was issued.
type failedWork struct {
	err  error
	done chan struct{}
}

func failed(err error) nccl.DeviceWork {
	w := &failedWork{err: err, done: make(chan struct{})}
	close(w.done)
	return w
}

func (w *failedWork) Done() <-chan struct{}      { return w.done }
func (w *failedWork) Enqueued() <-chan struct{}  { return w.done }
func (w *failedWork) Wait(context.Context) error { return w.err }
