package ddp

import (
	"context"
	"fmt"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/replica"
	G "gorgonia.org/gorgonia"
)

// Program is a model compiled for DDP: a train.Program whose Run reduces the gradients over
// the group while backward runs, whose Step applies the optimizer or gorgonia solver given
// to Compile (nn.WithOptimizer, nn.WithSolver) and zeroes the gradients, and whose RunStep
// updates each bucket's parameters as soon as its reduction completes.
type Program struct {
	np          *nn.Program
	d           *DDP
	training    bool
	graphUnused []*nn.Param
}

// Compile builds the model with build, adding DDP's gradient hook (and, with SyncBatchNorm,
// the statistics reducer) to opts. Programs built with nn.Training(false) run without any
// communication. Build the programs of all in-process ranks one after the other: gorgonia's
// graph construction is not thread-safe. Do not pass nn.WithGradBuffer: DDP reduces the
// model's own gradient buffer. build may be a plain gorgonia build function of a model made
// by nn.NewGraphModel: its learnables' Node.Grad() then returns the averaged gradients.
func (d *DDP) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	all := append([]nn.BuildOption{}, opts...)
	all = append(all, nn.WithGradHook(d.onGrad))
	if d.cfg.syncBN {
		all = append(all, nn.WithStatsReducer(replica.StatsReducer{Group: d.g, Ctx: func() context.Context { return d.st.ctx }, Who: d.who()}))
	}
	np, err := nn.Compile(d.Model, build, all...)
	if err != nil {
		return nil, fmt.Errorf("ddp: rank %d: compile: %w", d.rank, err)
	}
	p := &Program{np: np, d: d, training: np.Builder.Training() && np.Loss != nil}
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

// Compiled returns the underlying nn program (its Run does not reduce: use the Program's).
func (p *Program) Compiled() *nn.Program { return p.np }

// SetInput copies data into the named input.
func (p *Program) SetInput(name string, data []float32) error {
	if err := p.np.SetInput(name, data); err != nil {
		return fmt.Errorf("ddp: rank %d: %w", p.d.rank, err)
	}
	return nil
}

// Input returns the memory of the named input.
func (p *Program) Input(name string) ([]float32, error) { return p.np.Input(name) }

// Output returns the named output of the last Run (aliases the program's memory).
func (p *Program) Output(name string) ([]float32, error) { return p.np.Output(name) }

// LossValue is this rank's loss in the last Run.
func (p *Program) LossValue() (float32, error) { return p.np.LossValue() }

// GlobalLoss is the mean over the ranks of their losses in the last Run: the global batch's
// loss. It is a collective (one all-reduce of one value): every rank calls it.
func (p *Program) GlobalLoss(ctx context.Context) (float32, error) {
	v, err := p.np.LossValue()
	if err != nil {
		return 0, err
	}
	return replica.Mean(ctx, p.d.g, v, p.d.who())
}

// Learnables returns the graph's learnables (see nn.Program.Learnables): after Run their
// Node.Grad() is the average of every rank's gradients.
func (p *Program) Learnables() G.Nodes { return p.np.Learnables() }

// ZeroGrad zeroes the model's gradients.
func (p *Program) ZeroGrad() error { p.d.Model.Params.ZeroGrad(); return nil }

// Close releases the tape machine.
func (p *Program) Close() error { return p.np.Close() }

// GraphUnused lists the parameters the program's graph does not use (known at build time).
func (p *Program) GraphUnused() []*nn.Param { return p.graphUnused }

// Run runs one step on this rank: forward, and backward during which every full bucket of
// gradients starts its reduction; then it waits for the reductions, so that on return the
// gradient buffer holds the average of every rank's gradients (under NoSync: this rank's
// accumulated gradients). Gradients accumulate until Step or ZeroGrad. Every rank must call
// Run the same number of times (see Join for uneven inputs). Every CheckEvery-th synchronised
// Run first checks that the replicas' parameters and buffers still agree.
func (p *Program) Run(ctx context.Context) error {
	return p.run(ctx, nil)
}

// run is Run with finish's per-bucket callback.
func (p *Program) run(ctx context.Context, done func(*Bucket) error) error {
	if !p.training {
		return p.np.Run(ctx)
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
	if sync {
		// After the buffer broadcast: before it, each rank's running statistics are those
		// its own last forward left.
		if err := d.checkAgreement(ctx); err != nil {
			return err
		}
	}
	d.beginStep(ctx, sync)
	runErr := d.preMark(p.graphUnused)
	if runErr == nil {
		runErr = p.np.Run(ctx)
	}
	return d.finish(ctx, runErr, done)
}

// stepPiece is the number of elements the ranged update does between yields to the
// communication: 1 MiB of parameters, a few tenths of a millisecond of SGD or Adam.
const stepPiece = 1 << 18

// RangedOptimizer is an optimizer that can apply one step in pieces (optim.SGD, optim.Adam
// and AdamW implement it; see optim.Ranged): RunStep then updates each bucket's parameters
// as soon as that bucket's all-reduce has completed, while the later buckets are still
// reducing, which fills the time a rank would otherwise spend waiting for the slowest rank's
// last gradients. The result is bit-identical to Step after Run.
type RangedOptimizer interface {
	GradsWithin(buf []float32) bool
	BeginStep() error
	StepGrads(grad []float32) error
	EndStep() error
}

// Step applies the program's optimizer or solver (given to Compile) to the reduced
// gradients, with the optimizer on the timeline, then zeroes the gradients.
func (p *Program) Step(ctx context.Context) error {
	d := p.d
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	if err := p.np.Update(); err != nil {
		return fmt.Errorf("ddp: rank %d: optimizer step: %w", d.rank, err)
	}
	d.tl.add(Event{Name: EvOptimizer, Step: d.steps - 1, Bucket: -1, Start: start, End: time.Now()})
	p.ZeroGrad()
	return nil
}

// RunStep is Run followed by Step. When the program's optimizer is a RangedOptimizer whose
// gradients all lie in the model's gradient buffer and the step reduces gradients (not
// under NoSync), each bucket's parameters are updated as soon as the bucket's reduction
// completes. If a reduction fails, the buckets before it may already be updated: the group
// is broken, and the error says which bucket failed.
func (p *Program) RunStep(ctx context.Context) error {
	d := p.d
	if r, ok := p.np.Optimizer().(RangedOptimizer); ok && p.training && !d.noSync && r.GradsWithin(d.Model.Params.Grad) {
		if err := p.rangedStep(ctx, r); err != nil {
			return err
		}
		p.ZeroGrad()
		return nil
	}
	if err := p.Run(ctx); err != nil {
		return err
	}
	return p.Step(ctx)
}

func (p *Program) rangedStep(ctx context.Context, r RangedOptimizer) error {
	d := p.d
	began := false
	done := func(b *Bucket) error {
		if !began {
			if err := r.BeginStep(); err != nil {
				return fmt.Errorf("ddp: rank %d: optimizer step: %w", d.rank, err)
			}
			began = true
		}
		// In pieces, yielding between them to reductions still under way (Note [Yielding to
		// communication]); pieces give the same bits (optim.Ranged).
		for g := b.Grad; len(g) > 0; {
			n := min(len(g), stepPiece)
			if err := r.StepGrads(g[:n]); err != nil {
				return fmt.Errorf("ddp: rank %d: optimizer step on %s: %w", d.rank, b, err)
			}
			if g = g[n:]; len(g) > 0 {
				d.yieldToComm()
			}
		}
		return nil
	}
	runErr := p.run(ctx, done)
	if !began {
		if runErr != nil {
			return runErr
		}
		// No bucket (a model without parameters): a plain update.
		if err := p.np.Update(); err != nil {
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
