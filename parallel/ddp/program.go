package ddp

import (
	"context"
	"fmt"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/replica"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
	G "gorgonia.org/gorgonia"
)

// Program is a model compiled for DDP on its backend: a train.Program whose Run reduces the
// gradients over the group while backward runs, whose Step applies the optimizer (on the
// host: the optimizer or gorgonia solver given to Compile, nn.WithOptimizer or
// nn.WithSolver; on a device: the device state's) and zeroes the gradients, and whose
// RunStep updates each bucket's parameters as soon as its reduction has landed.
type Program struct {
	x           Executor
	d           *DDP
	training    bool
	graphUnused []*nn.Param
}

// Compile builds the model with build on the backend, adding DDP's gradient hook (and, with
// SyncBatchNorm, the statistics reducer) to opts. Programs built with nn.Training(false) run
// without any communication. Build the programs of all in-process ranks one after the
// other: gorgonia's graph construction is not thread-safe. Do not pass nn.WithGradBuffer:
// DDP reduces the model's own gradient buffer. build may be a plain gorgonia build function
// of a model made by nn.NewGraphModel: on the host backend its learnables' Node.Grad() then
// returns the averaged gradients.
func (d *DDP) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	all := append([]nn.BuildOption{}, opts...)
	all = append(all, nn.WithGradHook(d.onGrad))
	if d.cfg.syncBN {
		all = append(all, nn.WithStatsReducer(replica.StatsReducer{Group: d.g, Ctx: func() context.Context { return d.st.ctx }, Who: d.who()}))
	}
	x, err := d.be.Compile(build, all...)
	if err != nil {
		return nil, fmt.Errorf("%s: compile: %w", d.who(), err)
	}
	np := x.Compiled()
	return &Program{x: x, d: d, training: np.Builder.Training() && np.Loss != nil, graphUnused: graphUnused(d.Model.Params, np)}, nil
}

// graphUnused lists the parameters of ps that np's graph does not use (known at build
// time): marked ready before backward under FindUnusedParameters and StaticGraph.
func graphUnused(ps *nn.ParamSet, np *nn.Program) []*nn.Param {
	var out []*nn.Param
	for _, q := range ps.Params {
		if np.Builder.Leaf(q) == nil {
			out = append(out, q)
		}
	}
	return out
}

// Compiled returns the nn program the model was built as (on the host backend the program
// that runs; its Run does not reduce: use the Program's).
func (p *Program) Compiled() *nn.Program { return p.x.Compiled() }

// SetInput copies data into the named input.
func (p *Program) SetInput(name string, data []float32) error {
	if err := p.x.SetInput(name, data); err != nil {
		return fmt.Errorf("%s: %w", p.d.who(), err)
	}
	return nil
}

// Input returns the memory of the named input.
func (p *Program) Input(name string) ([]float32, error) { return p.x.Input(name) }

// Output returns the named output of the last Run (aliases the program's memory).
func (p *Program) Output(name string) ([]float32, error) { return p.x.Output(name) }

// LossValue is this rank's loss in the last Run.
func (p *Program) LossValue() (float32, error) { return p.x.LossValue() }

// GlobalLoss is the mean over the ranks of their losses in the last Run: the global batch's
// loss. It is a collective (one all-reduce of one value): every rank calls it.
func (p *Program) GlobalLoss(ctx context.Context) (float32, error) {
	v, err := p.x.LossValue()
	if err != nil {
		return 0, err
	}
	return replica.Mean(ctx, p.d.g, v, p.d.who())
}

// Learnables returns the graph's learnables (see nn.Program.Learnables): on the host
// backend, after Run their Node.Grad() is the average of every rank's gradients.
func (p *Program) Learnables() G.Nodes { return p.x.Compiled().Learnables() }

// ZeroGrad zeroes the model's gradients where the backend keeps them.
func (p *Program) ZeroGrad() error {
	if err := p.d.be.ZeroGrad(); err != nil {
		return fmt.Errorf("%s: %w", p.d.who(), err)
	}
	return nil
}

// Close releases the backend's program.
func (p *Program) Close() error { return p.x.Close() }

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
		return p.x.Run(ctx)
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
		runErr = p.x.Run(ctx)
	}
	return d.finish(ctx, runErr, done)
}

// stepPiece is the number of elements the ranged update does between yields to the
// communication: 1 MiB of parameters, a few tenths of a millisecond of SGD or Adam.
const stepPiece = 1 << 18

// Step applies the program's optimizer (see Program) to the reduced gradients, with the
// optimizer on the timeline, then zeroes the gradients.
func (p *Program) Step(ctx context.Context) error {
	d := p.d
	if err := ctx.Err(); err != nil {
		return err
	}
	start := time.Now()
	if err := p.x.Update(ctx); err != nil {
		return fmt.Errorf("%s: optimizer step: %w", d.who(), err)
	}
	d.tl.Add(timeline.Event{Name: timeline.EvOptimizer, Step: d.steps - 1, Bucket: -1, Start: start, End: time.Now()})
	return p.ZeroGrad()
}

// RunStep is Run followed by Step. When the program's optimizer can update bucket by bucket
// (Executor.Ranged: on the host an optim.Ranged whose gradients all lie in the model's
// gradient buffer, on a device the device state's) and the step reduces gradients (not
// under NoSync), each bucket's parameters are updated as soon as the bucket's reduction has
// landed, while later buckets still reduce: the same bits as Step after Run, with the wait
// for the slowest rank's last gradients spent updating. If a reduction fails, the buckets
// before it may already be updated: the group is broken, and the error says which bucket
// failed.
func (p *Program) RunStep(ctx context.Context) error {
	if s := p.x.Ranged(); s != nil && p.training && !p.d.noSync {
		if err := p.rangedStep(ctx, s); err != nil {
			return err
		}
		return p.ZeroGrad()
	}
	if err := p.Run(ctx); err != nil {
		return err
	}
	return p.Step(ctx)
}

func (p *Program) rangedStep(ctx context.Context, s BucketStepper) error {
	d := p.d
	began := false
	done := func(b *Bucket) error {
		if !began {
			if err := s.BeginStep(); err != nil {
				return fmt.Errorf("optimizer step: %w", err)
			}
			began = true
		}
		if err := s.StepBucket(b); err != nil {
			return fmt.Errorf("optimizer step on %s: %w", b, err)
		}
		return nil
	}
	runErr := p.run(ctx, done)
	if !began {
		if runErr != nil {
			return runErr
		}
		// No bucket (a model without parameters): a plain update.
		if err := p.x.Update(ctx); err != nil {
			return fmt.Errorf("%s: optimizer step: %w", d.who(), err)
		}
		return nil
	}
	// Every element of the gradient buffer is in a bucket, so every element is updated.
	if err := s.EndStep(); err != nil && runErr == nil {
		runErr = fmt.Errorf("%s: optimizer step: %w", d.who(), err)
	}
	return runErr
}
