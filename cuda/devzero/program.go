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
// with the gradient hook that hands each gradient, added into its unit's block, to the
// gradient schedule and, under zero.SyncBatchNorm, the statistics reducer over the engine's
// group (zero.Backend).
func (e *Backend) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (zero.Executor, error) {
	onGrad := func(p *nn.Param) error { _, err := e.red.Arrive(p); return err }
	all := append(append([]nn.BuildOption(nil), opts...), nn.WithGradHook(onGrad))
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
	e.ranged, e.began = ranged, false
	e.red.Begin(ctx)
	runErr := p.Program.Run(ctx)
	if p.training {
		runErr = e.red.Finish(runErr)
	}
	errs := []error{runErr, e.waitGathers(ctx)}
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

// reducer is the backend as zero.UnitReducer: gradient blocks reduce-scattered over NCCL on
// the group's stream and added into the shard on the compute stream (in stream order).
type reducer struct{ e *Backend }

// Launch reduce-scatters unit i's gradient block into a shard-sized block on the group's
// stream, after the compute stream's work so far; a unit no gradient reached has none. A
// failure is the unit's Work's.
func (r reducer) Launch(i int) nccl.DeviceWork {
	e, u := r.e, r.e.units[i]
	if e.gradBlk[i] == nil {
		return nil
	}
	e.emit("reduce", i, tape.Backward)
	var err error
	if e.rsDst[i], err = e.dev.Alloc(cuda.Float32, u.Shard); err != nil {
		return nccl.FailedDeviceWork(fmt.Errorf("its result (%d floats): %w", u.Shard, err))
	}
	if err := e.dev.Context().EventRecord(e.ready[i], e.dev.Stream()); err != nil {
		return nccl.FailedDeviceWork(fmt.Errorf("recording its ready event: %w", err))
	}
	return e.coll.ReduceScatterDeviceAfter(e.rsDst[i].Ptr(), e.gradBlk[i].Ptr(), u.Shard, libnccl.Float32, comm.Sum, e.ready[i], e.reduced[i])
}

// Retire adds unit i's reduction into the gradient shard in stream order: the compute
// stream waits for it, adds the result divided by the world size into the unit's shard,
// frees the unit's blocks (and, under offload, copies it to pinned host memory; when
// ranged, steps it with the device AdamW). A unit with no reduction (no gradient reached it
// in this Run) keeps its shard as accumulated.
func (r reducer) Retire(i int, w nccl.DeviceWork) error {
	e, u := r.e, r.e.units[i]
	if w != nil {
		if err := nccl.StreamWait(e.ctx, e.dev.Context(), e.dev.Stream(), w, e.reduced[i], "reduce-scatter"); err != nil {
			return err
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
			return err
		}
		e.freeGrad(i)
	}
	err := e.opt.gradArrived(u)
	if err == nil && e.ranged && !e.began {
		err = e.opt.begin()
		e.began = err == nil
	}
	if err == nil && e.ranged {
		err = e.opt.stepRange(u.ShardBase, u.ShardBase+u.Shard)
	}
	return err
}
