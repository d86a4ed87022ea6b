package trainer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/train"
)

// replicated is the engine of DDP (and of DataParallel and a single process): every rank
// holds the whole model and optimizer state; gradients are averaged by all-reduce. Rank 0
// writes checkpoints (one .npz each, torchvision keys for the model), every rank reads them.
type replicated struct {
	stepper
	cfg     *settings
	g       comm.Group
	d       *ddp.DDP
	model   *nn.Model
	opt     optim.Optimizer
	evals   map[int]evalProgram
	evalOpt []nn.BuildOption
	shape   [3]int
	ck      *checkpoints
	ema     *modelEMA   // -model-ema, nil without
	dst     *tape.State // -device cuda: parameters, gradients, optimizer on the device (nil: the host's)
	release func()      // frees dst and what owns it (compileOn)
}

func (r *replicated) modelEMA() *modelEMA { return r.ema }

func newReplicatedEngine(ctx context.Context, cfg *settings, strat strategy, g comm.Group, model *nn.Model, shape [3]int, log *slog.Logger) (engine, error) {
	// The model state is identical on every rank after ddp.New (rank 0's is broadcast), and
	// checkpoints are read by every rank, so a resumed run starts in step everywhere.
	dopts := append([]ddp.Option{ddp.TimelineSteps(timelineSteps(cfg))}, cfg.CommHook.options()...)
	if cfg.SyncBN {
		dopts = append(dopts, ddp.SyncBatchNorm())
	}
	d, err := newDDP(ctx, cfg, g, model, dopts)
	if err != nil {
		return nil, err
	}
	opts, scaler, err := precision(cfg, g)
	if err != nil {
		return nil, err
	}
	segs, err := optim.Segments(model.Params, cfg.WeightDecay)
	if err != nil {
		return nil, err
	}
	opt, err := newOptimizer(cfg, segs)
	if err != nil {
		return nil, err
	}
	update := nn.WithOptimizer(opt)
	if cfg.solver != nil {
		opt, update = newSolverOptimizer(cfg.solver, model.Params, cfg.LR), nn.WithSolver(cfg.Solver)
	}
	var prog train.Program
	var dst *tape.State
	var release func()
	if cfg.dev != nil {
		build := func(n int) nn.BuildFunc {
			return cfg.buildFor(n, shape, scaler)
		}
		prog, dst, release, err = compileOn(cfg, d, g, model, opt, build, opts)
	} else {
		prog, err = strat.compile(cfg, d, model, cfg.Batch/g.Size(), shape, scaler, append(opts, update))
	}
	if err != nil {
		return nil, err
	}
	var ema *modelEMA
	if cfg.ModelEMA {
		ema = newModelEMA(model.Params, cfg.EMADecay)
	}
	var grads gradBuffer = hostGrads(func() []float32 { return model.Params.Grad })
	if dst != nil {
		grads = deviceGrads{dst}
	}
	return &replicated{ema: ema, dst: dst, release: release,
		stepper: stepper{prog: prog, grads: grads, scaler: scaler, clip: cfg.ClipGrad,
			accum: cfg.GradAccum, noSync: d.NoSync, mix: newMixer(cfg, g.Rank())},
		cfg: cfg, g: g, d: d, model: model, opt: opt,
		evals: map[int]evalProgram{}, evalOpt: append([]nn.BuildOption{nn.Training(false)}, opts...),
		shape: shape, ck: &checkpoints{dir: cfg.Out, keep: cfg.Keep, log: log}}, nil
}

func (r *replicated) trainStep(ctx context.Context, b *data.Batch, at micro) (float32, error) {
	return r.run(ctx, b, at)
}

func (r *replicated) optimizer() optim.Optimizer { return r.opt }

func (r *replicated) evalLogits(ctx context.Context, b *data.Batch) ([]float32, error) {
	return runEval(ctx, r.cfg, r.evals, r.shape, b, func(build nn.BuildFunc) (evalProgram, error) {
		switch {
		case r.dst != nil && r.ema == nil: // reads the device's parameters, which the host's lag
			return r.dst.Compile(build, r.evalOpt...)
		case r.cfg.dev != nil:
			return tape.Compile(r.cfg.dev, r.model, build, r.evalOpt...)
		default:
			return r.d.Compile(build, r.evalOpt...)
		}
	})
}

// runEval runs the evaluation program for b's batch size from evals, compiling it with
// compile (from the build of a batch of b.N images of shape) the first time that size comes,
// and returns its logits.
func runEval(ctx context.Context, cfg *settings, evals map[int]evalProgram, shape [3]int, b *data.Batch, compile func(nn.BuildFunc) (evalProgram, error)) ([]float32, error) {
	p, ok := evals[b.N]
	if !ok {
		var err error
		if p, err = compile(cfg.buildEval(b.N, shape)); err != nil {
			return nil, err
		}
		evals[b.N] = p
	}
	if err := fillInputs(p.Input, b); err != nil {
		return nil, err
	}
	if err := p.Run(ctx); err != nil {
		return nil, err
	}
	return p.Output("logits")
}

// evalProgram is an eval-mode program: ddp's on the CPU, cuda/tape's on the device.
type evalProgram interface {
	Input(name string) ([]float32, error)
	Run(ctx context.Context) error
	Output(name string) ([]float32, error)
	Close() error
}

// close closes the programs, then frees the device state (the parameters, gradients and
// optimizer state on the device) and what owns it, if any (compileOn's release).
func (r *replicated) close() error {
	err := closePrograms(r.prog, r.evals)
	if r.release != nil {
		r.release()
		r.release = nil
	}
	r.dst = nil
	return err
}

func (r *replicated) state(meta *checkpoint.State) *checkpoint.State {
	st := *meta
	st.Model, st.Optimizer = r.model.Params, r.opt
	if r.ema != nil {
		st.Optimizer = r.ema.stateful(r.opt)
	}
	if r.scaler != nil {
		st.Scaler = r.scaler
	}
	return &st
}

func (r *replicated) save(ctx context.Context, meta *checkpoint.State) (string, error) {
	if r.g.Rank() != 0 {
		return r.ck.path(meta.Step), nil
	}
	if r.dst != nil {
		if err := r.dst.ToHost(ctx); err != nil {
			return "", fmt.Errorf("trainer: checkpoint: %w", err)
		}
	}
	return r.ck.save(r.state(meta))
}

func (r *replicated) resume(ctx context.Context, path string, meta *checkpoint.State) (string, error) {
	st := r.state(meta)
	load := func(p string) error {
		entries, err := checkpoint.Load(p)
		if err != nil {
			return err
		}
		if _, err := st.Restore(entries); err != nil {
			return fmt.Errorf("trainer: resume from %s%s: %w", p, mismatchHint(err), err)
		}
		return nil
	}
	path, err := r.ck.open(path, load)
	if err != nil || path == "" {
		return "", err
	}
	if r.dst != nil {
		if err := r.dst.FromHost(); err != nil {
			return "", fmt.Errorf("trainer: resume from %s: %w", path, err)
		}
	}
	meta.Step, meta.Epoch = st.Step, st.Epoch
	return path, nil
}

func (r *replicated) report(ctx context.Context, cfg *settings, res *Result) error {
	res.OverlapFrac = r.d.Timeline().Summary().OverlapFraction
	return writeTimelines(ctx, r.g, cfg, r.d.Timeline(), res)
}
