package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// sharded is the ZeRO-3 engine (-strategy zero3): each rank owns 1/N of the parameters,
// gradients and optimizer state, in host memory (optionally offloaded, -offload cpu|disk) or,
// with -device cuda, on this rank's GPU (cuda/devzero's backend, zero.WithBackend: the units
// all-gathered and the gradients reduce-scattered by NCCL on the device over the group
// deviceGroup makes, one rank's at world size 1 without a launcher; AdamW on the device or,
// with -offload cpu, -opt adamw or sgd on the CPU). The engine is zero.New's either way, and
// so is everything below: -amp fp16's unscale and inf/NaN check, -grad-accum-steps' 1/A and
// -clip-grad work on each rank's gradient shard (zero.Engine's UnscaleGrads, ScaleGrads,
// ClipGradNorm: the norm all-reduced over the ranks); -sync-bn sums BatchNorm's statistics
// over the ranks (zero.SyncBatchNorm). Checkpoints are sharded: OUT/zero/step-N/ holds one
// file per rank and a manifest (zero.Engine.Save), plus trainer.npz with the schedule, step,
// epoch, RNG and loss scale; OUT/zero/LATEST names the newest complete one. They resume
// bit-identically at any world size, on the host or the device.
type sharded struct {
	stepper
	cfg     *settings
	g       comm.Group
	e       *zero.Engine
	evals   map[int]evalProgram
	evalOpt []nn.BuildOption
	shape   [3]int
	ck      *checkpoints
	tl      *timeline.Timeline
	steps   int
}

func newShardedEngine(ctx context.Context, cfg *settings, _ strategy, g comm.Group, model *nn.Model, shape [3]int, log *slog.Logger) (engine, error) {
	if cfg.ModelEMA {
		return nil, fmt.Errorf("trainer: -model-ema needs a replicated strategy (ddp, dp or none): under zero3 no rank holds the whole model")
	}
	opts, err := shardedOptions(cfg)
	if err != nil {
		return nil, err
	}
	eg := g // the engine's group: g on the host, an NCCL group on the device
	if cfg.dev != nil {
		opts = append(opts, zero.WithBackend(devzero.NewBackend(cfg.dev)))
		if eg, err = deviceGroup(ctx, cfg, g, "trainer-zero3"); err != nil {
			return nil, err
		}
	}
	// New checks the ranks' models and broadcasts rank 0's parameters over eg.
	e, err := zero.New(ctx, model, eg, opts...)
	if err != nil {
		if cfg.dev != nil {
			return nil, fmt.Errorf("trainer: -device %s: %w", cfg.Device, err)
		}
		return nil, err
	}
	// -amp is autocast in the graph (on the device, cuda/tape computes its ops in 16 bits);
	// fp16's loss scale is in the graph too, its scaler amp.NewShardedScaler over g (the
	// inf/NaN flag all-reduced so that every rank skips alike), its unscale on the shard.
	bopts, scaler, err := precision(cfg, g)
	if err != nil {
		return nil, errors.Join(err, e.Close())
	}
	prog, err := e.Compile(cfg.buildFor(cfg.Batch/g.Size(), shape, scaler), bopts...)
	if err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return &sharded{
		stepper: stepper{prog: prog, grads: e, scaler: scaler, clip: cfg.ClipGrad,
			accum: cfg.GradAccum, mix: newMixer(cfg, g.Rank())},
		cfg: cfg, g: g, e: e, evals: map[int]evalProgram{},
		evalOpt: append([]nn.BuildOption{nn.Training(false)}, bopts...), shape: shape,
		ck: &checkpoints{dir: filepath.Join(cfg.Out, "zero"), keep: cfg.Keep, log: log, sharded: true}, tl: timeline.New(g.Rank(), timelineSteps(cfg))}, nil
}

// shardedOptions are zero.New's options for the settings, on the host and the device alike;
// what the device cannot do is refused here (-opt other than adamw without -offload cpu) or
// by the settings' check (-offload disk) and by devzero's backend.
func shardedOptions(cfg *settings) ([]zero.Option, error) {
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
	switch {
	case cfg.Optimizer == "adamw":
		return append(opts, zero.WithOptimizer(zero.AdamW(cfg.LR))), nil
	case cfg.dev != nil && cfg.Offload != "cpu":
		return nil, fmt.Errorf("trainer: -opt %s with -strategy zero3 -device %s is not supported on the device (it steps AdamW on each rank's shard): pass -opt adamw, -offload cpu to step -opt %s on the CPU, or -strategy ddp", cfg.Optimizer, cfg.Device, cfg.Optimizer)
	case cfg.Offload == "disk":
		return nil, fmt.Errorf("trainer: -offload disk needs -opt adamw (its state is what goes to disk)")
	}
	return append(opts, zero.WithOptimizer(zero.Optim(func(segs []optim.Segment) (optim.Optimizer, error) {
		return newOptimizer(cfg, segs)
	}))), nil
}

// trainStep and update are the stepper's, with the step on the timeline: one event for
// forward and backward with their gathers and reduce-scatters (ZeRO-3's collectives run
// inside the tape, so the step is not split further here), one for the update.
func (s *sharded) trainStep(ctx context.Context, b *data.Batch, at micro) (float32, error) {
	start := time.Now()
	lv, err := s.run(ctx, b, at)
	s.tl.Add(timeline.Event{Name: "forward+backward", Step: s.steps, Bucket: -1, Start: start, End: time.Now()})
	return lv, err
}

func (s *sharded) update(ctx context.Context) error {
	start := time.Now()
	defer func() {
		s.tl.Add(timeline.Event{Name: timeline.EvOptimizer, Step: s.steps, Bucket: -1, Start: start, End: time.Now()})
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
	res.ModelStateBytes = s.e.Memory().ModelStateBytes()
	return writeTimelines(ctx, s.g, cfg, s.tl, res)
}

// saveShards writes a ZeRO-3 checkpoint under ck (OUT/zero/step-N/): rank 0's trainer.npz
// with the trainer's state (and the loss scaler's), then every rank's shard with e.Save,
// whose manifest and LATEST are written only when all are in place; rank 0 then prunes.
func saveShards(ctx context.Context, g comm.Group, ck *checkpoints, scaler *amp.GradScaler, e *zero.Engine, meta *checkpoint.State) (string, error) {
	dir := ck.path(meta.Step)
	if g.Rank() == 0 {
		st := *meta
		if scaler != nil {
			st.Scaler = scaler
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("trainer: checkpoint %s: %w", dir, err)
		}
		if err := checkpoint.SaveState(filepath.Join(dir, "trainer.npz"), &st); err != nil {
			return "", err
		}
	}
	if err := e.Save(ctx, ck.dir, filepath.Base(dir)); err != nil {
		return "", err
	}
	if g.Rank() == 0 {
		ck.prune()
	}
	return dir, nil
}

// resumeShards loads a ZeRO-3 checkpoint written by saveShards ("auto": the newest readable
// one under ck; "none" or "": nothing) into e and meta.
func resumeShards(ck *checkpoints, scaler *amp.GradScaler, e *zero.Engine, path string, meta *checkpoint.State) (string, error) {
	st := *meta
	if scaler != nil {
		st.Scaler = scaler
	}
	load := func(dir string) error {
		if _, err := checkpoint.LoadState(filepath.Join(dir, "trainer.npz"), &st); err != nil {
			return fmt.Errorf("trainer: resume from %s: %w", dir, err)
		}
		if err := e.Load(dir); err != nil {
			return fmt.Errorf("trainer: resume from %s%s: %w", dir, mismatchHint(err), err)
		}
		return nil
	}
	path, err := ck.open(path, load)
	if err != nil || path == "" {
		return "", err
	}
	meta.Step, meta.Epoch = st.Step, st.Epoch
	return path, nil
}

// close closes the programs, then the engine (its memory, offload files or device shards).
func (s *sharded) close() error {
	err := closePrograms(s.prog, s.evals)
	if e := s.e.Close(); err == nil {
		err = e
	}
	return err
}
