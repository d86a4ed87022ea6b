package trainer

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// sharded is the ZeRO-3 engine (-strategy zero3): each rank owns 1/N of the parameters,
// gradients and optimizer state (optionally offloaded, -offload cpu|disk). Checkpoints are
// sharded: OUT/zero/step-N/ holds one file per rank and a manifest (zero.Engine.Save), plus
// trainer.npz with the schedule, step, epoch, RNG and loss scale; OUT/zero/LATEST names the
// newest complete one. They resume at any world size.
type sharded struct {
	stepper
	cfg     *settings
	g       comm.Group
	e       *zero.Engine
	evals   map[int]evalProgram
	evalOpt []nn.BuildOption
	shape   [3]int
	ck      *checkpoints
	tl      *ddp.Timeline
	steps   int
}

func newShardedEngine(ctx context.Context, cfg *settings, _ strategy, g comm.Group, model *nn.Model, shape [3]int, log *slog.Logger) (engine, error) {
	if cfg.ModelEMA {
		return nil, fmt.Errorf("trainer: -model-ema needs a replicated strategy (ddp, dp or none): under zero3 no rank holds the whole model")
	}
	if cfg.dev != nil {
		return newDeviceShardedEngine(ctx, cfg, g, model, shape, log)
	}
	opts := []zero.Option{zero.WithWeightDecay(cfg.WeightDecay)}
	if cfg.SyncBN {
		opts = append(opts, zero.SyncBatchNorm())
	}
	switch cfg.Offload {
	case "":
	case "cpu":
		opts = append(opts, zero.WithOffload(zero.OffloadCPU, 0))
	case "disk":
		opts = append(opts, zero.WithOffload(zero.OffloadDisk, 0), zero.WithOffloadDir(filepath.Join(cfg.Out, "offload")))
	default:
		return nil, fmt.Errorf("trainer: unknown -offload %q (cpu or disk)", cfg.Offload)
	}
	if cfg.Optimizer == "adamw" {
		opts = append(opts, zero.WithOptimizer(zero.AdamW(cfg.LR)))
	} else {
		if cfg.Offload == "disk" {
			return nil, fmt.Errorf("trainer: -offload disk needs -opt adamw (its state is what goes to disk)")
		}
		opts = append(opts, zero.WithOptimizer(zero.Optim(func(segs []optim.Segment) (optim.Optimizer, error) {
			return optim.NewSGD(segs, cfg.LR, optim.WithMomentum(cfg.Momentum))
		})))
	}
	e, err := zero.New(ctx, model, g, opts...)
	if err != nil {
		return nil, err
	}
	bopts, scaler, err := precision(cfg, g)
	if err != nil {
		return nil, err
	}
	local := cfg.Batch / g.Size()
	prog, err := e.Compile(cfg.buildFor(local, shape, scaler), bopts...)
	if err != nil {
		return nil, err
	}
	return &sharded{
		// Each rank holds a disjoint shard: the norm is the all-reduced sum of squares.
		stepper: stepper{prog: prog, grads: e.ShardGrad, normGroup: g, scaler: scaler, clip: cfg.ClipGrad,
			accum: cfg.GradAccum, mix: newMixer(cfg, g.Rank())},
		cfg: cfg, g: g, e: e, evals: map[int]evalProgram{},
		evalOpt: append([]nn.BuildOption{nn.Training(false)}, bopts...), shape: shape,
		ck: &checkpoints{dir: filepath.Join(cfg.Out, "zero"), keep: cfg.Keep, log: log, sharded: true}, tl: ddp.NewTimeline(g.Rank(), timelineSteps(cfg))}, nil
}

// trainStep and update are the stepper's, with the step on the timeline: one event for
// forward and backward with their gathers and reduce-scatters (ZeRO-3's collectives run
// inside the tape, so the step is not split further here), one for the update.
func (s *sharded) trainStep(ctx context.Context, b *data.Batch, at micro) (float32, error) {
	start := time.Now()
	lv, err := s.run(ctx, b, at)
	s.tl.Add(ddp.Event{Name: "forward+backward", Step: s.steps, Bucket: -1, Start: start, End: time.Now()})
	return lv, err
}

func (s *sharded) update(ctx context.Context) error {
	start := time.Now()
	defer func() {
		s.tl.Add(ddp.Event{Name: ddp.EvOptimizer, Step: s.steps, Bucket: -1, Start: start, End: time.Now()})
		s.steps++
	}()
	return s.stepper.update(ctx)
}

func (s *sharded) optimizer() optim.Optimizer { return s.e.Optimizer() }

// evalLogits runs a ZeRO-3 evaluation graph: its forward gathers parameters, so every rank
// must run the same number of batches (evaluate pads the ranks that have fewer).
func (s *sharded) evalLogits(ctx context.Context, b *data.Batch) ([]float32, error) {
	return runEval(ctx, s.cfg, s.evals, s.shape, b, func(build nn.BuildFunc) (evalProgram, error) { return s.e.Compile(build, s.evalOpt...) })
}

func (s *sharded) save(ctx context.Context, meta *checkpoint.State) (string, error) {
	return saveShards(ctx, s.g, s.ck, s.scaler, s.e, meta)
}

func (s *sharded) resume(ctx context.Context, path string, meta *checkpoint.State) (string, error) {
	return resumeShards(s.ck, s.scaler, s.e, path, meta)
}

func (s *sharded) report(ctx context.Context, cfg *settings, res *Result) error {
	m := s.e.Memory()
	res.ModelStateBytes = m.MasterBytes + m.GradBytes + m.StateBytes
	return writeTimelines(ctx, s.g, cfg, s.tl, res)
}
