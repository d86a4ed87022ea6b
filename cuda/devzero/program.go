package devzero

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/replica"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// program is a model compiled for device ZeRO-3, zero.Executor: Run runs forward and
// backward on the device, gathering each unit ahead of its readers and freeing it after,
// and leaves the rank's shard of the average gradient in the gradient shard. SetInput,
// Input, Output, LossValue and Close are the tape program's. A program built with
// nn.Training(false) gathers and runs forward with no reduction (still collective).
type program struct {
	*tape.Program
	e        *Backend
	needs    []tape.UnitEvent // the tape's Need calls, in order
	training bool
}

// Compile builds the model with build on the backend's unit state (tape.State.Compile)
// with the gradient hook that reduce-scatters each complete unit and, under
// zero.SyncBatchNorm, the statistics reducer over the engine's group (zero.Backend).
func (e *Backend) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (zero.Executor, error) {
	all := append(append([]nn.BuildOption(nil), opts...), nn.WithGradHook(e.onGrad))
	if e.syncBN {
		all = append(all, nn.WithStatsReducer(replica.StatsReducer{Group: e.coll, Ctx: func() context.Context { return e.ctx }, Who: e.who()}))
	}
	tp, err := e.st.Compile(build, all...)
	if err != nil {
		return nil, err
	}
	p := &program{Program: tp, e: e, training: tp.CPU().Builder.Training() && tp.CPU().Loss != nil}
	for _, ev := range tp.UnitSchedule() {
		if ev.Need {
			p.needs = append(p.needs, ev)
		}
	}
	return p, nil
}

// Training is whether Run reduces gradients (zero.Executor).
func (p *program) Training() bool { return p.training }

// Units are the units the program gathers in forward order.
func (p *program) Units() []int {
	var out []int
	for _, ev := range p.needs {
		if ev.Phase == tape.Forward {
			out = append(out, ev.Unit)
		}
	}
	return out
}

// Run runs one step on this rank: on return the gradient shard holds (in stream order) this
// rank's shard of the average over the ranks of the gradients accumulated since the last
// Step or ZeroGrad.
func (p *program) Run(ctx context.Context) error {
	return p.run(ctx, false)
}

// RunStep is Run then Step and ZeroGrad, with each unit's shard updated by the device AdamW
// as soon as the compute stream has its reduced gradient, while later units still reduce
// (train's Overlapped); under zero.OffloadCPU, and for an evaluation program, it is Run
// then Step.
func (p *program) RunStep(ctx context.Context) error {
	ranged := p.training && !p.e.opt.offload
	if err := p.run(ctx, ranged); err != nil {
		return err
	}
	if !ranged {
		if err := p.e.Step(ctx); err != nil {
			return fmt.Errorf("devzero: rank %d: optimizer step: %w", p.e.rank, err)
		}
	}
	return p.e.ZeroGrad()
}

func (p *program) run(ctx context.Context, ranged bool) error {
	e := p.e
	if e.closed {
		return zero.ErrClosed
	}
	e.beginRun(ctx, p.needs)
	e.begin(ranged)
	runErr := p.Program.Run(ctx)
	if !p.training {
		err := errors.Join(runErr, e.hookErr, e.waitGathers(ctx))
		e.freeBlocks()
		if err != nil {
			return fmt.Errorf("devzero: rank %d: %w", e.rank, err)
		}
		return nil
	}
	return e.finish(ctx, runErr)
}

func (e *Backend) begin(ranged bool) {
	n := len(e.model.Params.Params)
	if len(e.isReady) != n {
		e.isReady = make([]bool, n)
	}
	clear(e.isReady)
	e.pending = e.pending[:0]
	for _, u := range e.units {
		e.pending = append(e.pending, len(u.Params))
	}
	e.order, e.retired = e.order[:0], 0
	clear(e.rworks)
	e.ranged, e.began = ranged, false
	e.hookErr = nil
}

// onGrad is the gradient hook: p's gradient has been added into its unit's block.
func (e *Backend) onGrad(p *nn.Param) error {
	if e.isReady[p.Index] {
		err := fmt.Errorf("devzero: rank %d: gradient of %s arrived twice in one Run", e.rank, p.Name)
		if e.hookErr == nil {
			e.hookErr = err
		}
		return err
	}
	e.isReady[p.Index] = true
	u := e.lay.UnitOf(p.Index)
	if e.pending[u]--; e.pending[u] == 0 {
		e.launch(u)
		// The reductions issued before this one are added into the shard now, their blocks
		// freed: one unit's reduction runs beside the backward at a time.
		if err := e.retireUpTo(len(e.order) - 1); err != nil {
			if e.hookErr == nil {
				e.hookErr = err
			}
			return err
		}
	}
	return nil
}

// launch reduce-scatters unit i's gradient block into a shard-sized block on the group's
// stream, after the compute stream's work so far. A failure is the unit's Work's.
func (e *Backend) launch(i int) {
	u := e.units[i]
	e.order = append(e.order, i)
	e.emit("reduce", i, tape.Backward)
	var err error
	if e.rsDst[i], err = e.dev.Alloc(cuda.Float32, u.Shard); err != nil {
		e.rworks[i] = nccl.FailedDeviceWork(fmt.Errorf("unit %s's reduce-scatter result (%d floats): %w", u.Name, u.Shard, err))
		return
	}
	if err := e.dev.Context().EventRecord(e.ready[i], e.dev.Stream()); err != nil {
		e.rworks[i] = nccl.FailedDeviceWork(fmt.Errorf("recording unit %s's ready event: %w", u.Name, err))
		return
	}
	e.rworks[i] = e.coll.ReduceScatterDeviceAfter(e.rsDst[i].Ptr(), e.gradBlk[i].Ptr(), u.Shard, libnccl.Float32, comm.Sum, e.ready[i], e.reduced[i])
}

// retireUpTo adds the reductions order[retired:n] into the gradient shard in stream order:
// the compute stream waits for each, frees the unit's gradient block, adds the result
// divided by the world size into the unit's shard (and, under offload, copies it to pinned
// host memory; when ranged, steps it with the device AdamW). A unit with no reduction (no
// gradient reached it in this Run) keeps its shard as accumulated.
func (e *Backend) retireUpTo(n int) error {
	c, s := e.dev.Context(), e.dev.Stream()
	for ; e.retired < n; e.retired++ {
		i := e.order[e.retired]
		u := e.units[i]
		if w := e.rworks[i]; w != nil {
			select {
			case <-w.Done(): // failed before it was issued, or already over: a failure ends here
				if err := w.Wait(e.ctx); err != nil {
					return err
				}
			default:
			}
			select {
			case <-w.Enqueued():
			case <-e.ctx.Done():
				return fmt.Errorf("waiting for unit %s's reduce-scatter to be enqueued: %w", u.Name, e.ctx.Err())
			}
			if err := c.StreamWaitEvent(s, e.reduced[i]); err != nil {
				return fmt.Errorf("waiting for unit %s's reduce-scatter: %w", u.Name, err)
			}
			if g := e.gradBlk[i]; g != nil {
				g.Free()
				e.gradBlk[i] = nil
				e.account(1, -4*u.Padded)
			}
			g, err := e.shardG.View(u.ShardBase, u.Shard)
			if err == nil && e.world > 1 {
				// As parallel/zero's: a power of two's reciprocal is exact, so this is the division.
				err = e.dev.Scale(e.rsDst[i], e.rsDst[i], 1/float32(e.world))
			}
			if err == nil {
				err = e.dev.Add(g, g, e.rsDst[i])
			}
			if err != nil {
				return fmt.Errorf("unit %s's gradient shard: %w", u.Name, err)
			}
			e.rsDst[i].Free()
			e.rsDst[i] = nil
		}
		err := e.opt.gradArrived(u)
		if err == nil && e.ranged {
			if !e.began {
				if err = e.opt.begin(); err != nil {
					return err
				}
				e.began = true
			}
			err = e.opt.stepRange(u.ShardBase, u.ShardBase+u.Shard)
		}
		if err != nil {
			return fmt.Errorf("unit %s's gradient shard: %w", u.Name, err)
		}
	}
	return nil
}

// finish launches the units whose gradients are incomplete (a parameter that does not
// reach the loss) and notes those that got none, adds every reduction into the shard, then
// waits for the collectives, reports their errors and frees what is left.
func (e *Backend) finish(ctx context.Context, runErr error) error {
	errs := []error{runErr, e.hookErr}
	for i := range e.units {
		if e.pending[i] == 0 {
			continue
		}
		e.pending[i] = 0
		if e.gradBlk[i] != nil {
			e.launch(i)
		} else {
			e.order = append(e.order, i) // rworks[i] stays nil: nothing to reduce
		}
	}
	if errors.Join(errs...) == nil {
		errs = append(errs, e.retireUpTo(len(e.order)))
	}
	for _, i := range e.order {
		if w := e.rworks[i]; w != nil {
			if err := w.Wait(ctx); err != nil {
				errs = append(errs, fmt.Errorf("reduce-scatter of unit %s: %w", e.units[i].Name, err))
			}
		}
	}
	errs = append(errs, e.waitGathers(ctx))
	e.freeBlocks()
	if e.began {
		errs = append(errs, e.opt.end())
	}
	if err := errors.Join(errs...); err == nil && e.ranged && !e.began {
		// No unit (a model without parameters): a plain step.
		errs = append(errs, e.opt.step(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("devzero: rank %d: %w", e.rank, err)
	}
	return nil
}
