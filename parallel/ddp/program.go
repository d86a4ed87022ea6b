package ddp

import (
	"context"
	"fmt"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Program is an nn.Program whose training runs reduce gradients over the group.
type Program struct {
	// Program is the compiled graph; Input, SetInput, Output and LossValue work as usual.
	// Do not call its Run directly for training: use Program.Run of the wrapper.
	*nn.Program

	d           *DDP
	training    bool
	graphUnused []*nn.Param
}

// Optimizer is what Program.Step needs of an optimizer (optim.Optimizer satisfies it).
type Optimizer interface {
	Step() error
}

// Compile builds the model with build, adding DDP's gradient hook (and, with SyncBatchNorm,
// the statistics reducer) to opts. Programs built with nn.Training(false) run without any
// communication. Build the programs of all in-process ranks one after the other: gorgonia's
// graph construction is not thread-safe. Do not pass nn.WithGradBuffer: DDP reduces the
// model's own gradient buffer.
func (d *DDP) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	all := append([]nn.BuildOption{}, opts...)
	all = append(all, nn.WithGradHook(d.onGrad))
	if d.cfg.syncBN {
		all = append(all, nn.WithStatsReducer(statsReducer{d}))
	}
	np, err := nn.Compile(d.Model, build, all...)
	if err != nil {
		return nil, fmt.Errorf("ddp: rank %d: compile: %w", d.rank, err)
	}
	p := &Program{Program: np, d: d, training: np.Builder.Training() && np.Loss != nil}
	used := map[*nn.Param]bool{}
	for _, q := range np.Builder.UsedParams() {
		used[q] = true
	}
	for _, q := range d.Model.Params.Params {
		if !used[q] {
			p.graphUnused = append(p.graphUnused, q)
		}
	}
	return p, nil
}

// GraphUnused lists the parameters the program's graph does not use (known at build time).
func (p *Program) GraphUnused() []*nn.Param { return p.graphUnused }

// Run runs one step on this rank: forward, and backward during which every full bucket of
// gradients starts its reduction; then it waits for the reductions, so that on return the
// gradient buffer holds the average of every rank's gradients (under NoSync: this rank's
// accumulated gradients). Gradients accumulate as in PyTorch: zero them between steps.
// Every rank must call Run the same number of times (see Join for uneven inputs).
func (p *Program) Run(ctx context.Context) error {
	return p.run(ctx, nil)
}

// run is Run with finish's per-bucket callback.
func (p *Program) run(ctx context.Context, done func(*Bucket) error) error {
	if !p.training {
		return p.Program.Run(ctx)
	}
	d := p.d
	sync := !d.noSync
	root := 0
	if d.join != nil {
		var err error
		if root, err = d.join.handshake(ctx, d, sync); err != nil {
			return err
		}
	}
	if d.cfg.broadcastBuffers {
		if err := d.broadcastBuffers(ctx, root); err != nil {
			return err
		}
	}
	d.beginStep(ctx, sync)
	runErr := d.preMark(p.graphUnused)
	if runErr == nil {
		runErr = p.Program.Run(ctx)
	}
	return d.finish(ctx, runErr, done)
}

// RangedOptimizer is an optimizer that can apply one step in pieces (optim.SGD, optim.Adam
// and AdamW implement it; see optim.Ranged): Program.Step then updates each bucket's
// parameters as soon as that bucket's all-reduce has completed, while the later buckets
// are still reducing, which fills the time a rank would otherwise spend waiting for the
// slowest rank's last gradients. The result is bit-identical to one opt.Step after Run.
type RangedOptimizer interface {
	GradsWithin(buf []float32) bool
	BeginStep() error
	StepGrads(grad []float32) error
	EndStep() error
}

// Step is Run followed by the optimizer step, with the optimizer on the timeline. When opt
// is a RangedOptimizer whose gradients all lie in the model's gradient buffer and the step
// reduces gradients (not under NoSync), each bucket's parameters are updated as soon as the
// bucket's reduction completes. If a reduction fails, the buckets before it may already be
// updated: the group is broken, and the error says which bucket failed.
func (p *Program) Step(ctx context.Context, opt Optimizer) error {
	d := p.d
	if r, ok := opt.(RangedOptimizer); ok && p.training && !d.noSync && r.GradsWithin(d.Model.Params.Grad) {
		return p.rangedStep(ctx, opt, r)
	}
	if err := p.Run(ctx); err != nil {
		return err
	}
	start := time.Now()
	if err := opt.Step(); err != nil {
		return fmt.Errorf("ddp: rank %d: optimizer step: %w", d.rank, err)
	}
	d.tl.add(Event{Name: EvOptimizer, Step: d.steps - 1, Bucket: -1, Start: start, End: time.Now()})
	return nil
}

func (p *Program) rangedStep(ctx context.Context, opt Optimizer, r RangedOptimizer) error {
	d := p.d
	began := false
	done := func(b *Bucket) error {
		if !began {
			if err := r.BeginStep(); err != nil {
				return fmt.Errorf("ddp: rank %d: optimizer step: %w", d.rank, err)
			}
			began = true
		}
		if err := r.StepGrads(b.Grad); err != nil {
			return fmt.Errorf("ddp: rank %d: optimizer step on %s: %w", d.rank, b, err)
		}
		return nil
	}
	runErr := p.run(ctx, done)
	if !began {
		if runErr != nil {
			return runErr
		}
		// No bucket (a model without parameters): a plain step.
		if err := opt.Step(); err != nil {
			return fmt.Errorf("ddp: rank %d: optimizer step: %w", d.rank, err)
		}
		return nil
	}
	// Every element of the gradient buffer is in a bucket, so every element is updated.
	if err := r.EndStep(); err != nil && runErr == nil {
		runErr = fmt.Errorf("ddp: rank %d: optimizer step: %w", d.rank, err)
	}
	return runErr
}

// statsReducer is the SyncBatchNorm reducer: a blocking all-reduce Sum over the group.
type statsReducer struct{ d *DDP }

func (r statsReducer) ReduceStats(buf []float64) error {
	ctx := r.d.st.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if err := r.d.g.AllReduce(comm.F64(buf), comm.Sum).Wait(ctx); err != nil {
		return fmt.Errorf("ddp: rank %d: SyncBatchNorm all-reduce of %d statistics: %w", r.d.rank, len(buf), err)
	}
	return nil
}
