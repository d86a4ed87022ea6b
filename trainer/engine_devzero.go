package trainer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// devSharded is -strategy zero3 -device cuda: parallel/zero's engine with cuda/devzero's
// backend on this rank's GPU (zero.WithBackend), with the CPU zero3's options, the units all-gathered and the gradients reduce-scattered by NCCL
// on the device, AdamW on the rank's shard on the device or, with -offload cpu, the
// optimizer (-opt adamw or sgd) on the CPU. At world size 1 without a launcher the NCCL
// group is one rank's (deviceGroup). -amp is autocast in the graph; -amp fp16's unscale and
// inf/NaN check, -clip-grad and -grad-accum-steps' 1/A work on each rank's gradient shard
// (update); -sync-bn sums BatchNorm's statistics over the ranks (zero.SyncBatchNorm).
// Checkpoints are the CPU zero3's (OUT/zero/step-N/: one shard file per rank, a
// manifest, trainer.npz with the trainer's state), so a run resumes bit-identically from
// them at any world size, on the device or on the CPU.
type devSharded struct {
	stepper
	cfg     *settings
	g       comm.Group
	model   *nn.Model
	e       *zero.Engine
	be      *devzero.Backend // e's: the gradient shard's unscale, scaling and clipping
	evals   map[int]evalProgram
	evalOpt []nn.BuildOption
	shape   [3]int
	ck      *checkpoints
}

func newDeviceShardedEngine(ctx context.Context, cfg *settings, g comm.Group, model *nn.Model, shape [3]int, log *slog.Logger) (engine, error) {
	dev := cfg.Device
	switch {
	case cfg.Optimizer != "adamw" && cfg.Offload != "cpu":
		return nil, fmt.Errorf("trainer: -opt %s with -strategy zero3 -device %s is not supported on the device (it steps AdamW on each rank's shard): pass -opt adamw, -offload cpu to step -opt %s on the CPU, or -strategy ddp", cfg.Optimizer, dev, cfg.Optimizer)
	}
	be := devzero.NewBackend(cfg.dev)
	zopts := []zero.Option{zero.WithBackend(be), zero.WithWeightDecay(cfg.WeightDecay)}
	if cfg.SyncBN {
		zopts = append(zopts, zero.SyncBatchNorm())
	}
	if cfg.Offload == "cpu" {
		zopts = append(zopts, zero.WithOffload(zero.OffloadCPU, 0))
	}
	if cfg.Optimizer == "adamw" {
		zopts = append(zopts, zero.WithOptimizer(zero.AdamW(cfg.LR)))
	} else {
		zopts = append(zopts, zero.WithOptimizer(zero.Optim(func(segs []optim.Segment) (optim.Optimizer, error) {
			return newOptimizer(cfg, segs)
		})))
	}
	ng, err := deviceGroup(ctx, cfg, g, "trainer-zero3")
	if err != nil {
		return nil, err
	}
	// New checks the ranks' models and broadcasts rank 0's parameters over the NCCL group.
	e, err := zero.New(ctx, model, ng, zopts...)
	if err != nil {
		return nil, fmt.Errorf("trainer: -device %s: %w", dev, err)
	}
	// -amp is autocast in the graph (cuda/tape computes its ops in 16 bits); fp16's loss
	// scale is in the graph too, its scaler the CPU zero3's (amp.NewShardedScaler over g:
	// the inf/NaN flag all-reduced so that every rank skips alike), its unscale on the shard
	// (update).
	bopts, scaler, err := precision(cfg, g)
	if err != nil {
		e.Close()
		return nil, err
	}
	prog, err := e.Compile(cfg.buildFor(cfg.Batch/g.Size(), shape, scaler), bopts...)
	if err != nil {
		e.Close()
		return nil, err
	}
	return &devSharded{
		stepper: stepper{prog: prog, grads: func() []float32 { return nil }, scaler: scaler, clip: cfg.ClipGrad,
			accum: cfg.GradAccum, mix: newMixer(cfg, g.Rank())},
		cfg: cfg, g: g, model: model, e: e, be: be, evals: map[int]evalProgram{},
		evalOpt: append([]nn.BuildOption{nn.Training(false)}, bopts...), shape: shape,
		ck: &checkpoints{dir: filepath.Join(cfg.Out, "zero"), keep: cfg.Keep, log: log, sharded: true}}, nil
}

func (s *devSharded) trainStep(ctx context.Context, b *data.Batch, at micro) (float32, error) {
	return s.run(ctx, b, at)
}

// update is stepper.update on the rank's gradient shard (devzero.Backend's UnscaleGrads,
// ScaleGrads, ClipGradNorm: kernels over the device shard, or the pinned host copy under
// -offload cpu), in the host's order: unscale with the inf/NaN check, 1/A for gradient
// accumulation (every Run reduce-scatters and the shard accumulates, as the CPU zero3's),
// clip to the global norm (the shards' sums of squares all-reduced in float64 over g), then
// Step, or ZeroGrad when the scale overflowed on any rank, and the scale's update.
func (s *devSharded) update(ctx context.Context) error {
	if s.fused() {
		return nil
	}
	if s.scaler != nil {
		inf, err := s.be.UnscaleGrads(ctx, s.scaler.Scale())
		if err != nil {
			return fmt.Errorf("trainer: loss scale: %w", err)
		}
		tellScaler(s.scaler, inf)
	}
	if s.accum > 1 {
		if err := s.be.ScaleGrads(ctx, 1/float32(s.accum)); err != nil {
			return fmt.Errorf("trainer: gradient accumulation: %w", err)
		}
	}
	skip, err := s.clipSkipped(ctx)
	if err != nil {
		return err
	}
	if s.clip > 0 && !skip {
		sum := func(ctx context.Context, sq float64) (float64, error) {
			buf := []float64{sq}
			if err := s.g.AllReduce(comm.F64(buf), comm.Sum).Wait(ctx); err != nil {
				return 0, fmt.Errorf("trainer: gradient norm all-reduce: %w", err)
			}
			return buf[0], nil
		}
		if _, err := s.be.ClipGradNorm(ctx, s.clip, sum); err != nil {
			return fmt.Errorf("trainer: -clip-grad %g: %w (the loss diverged; a lower -lr or -amp fp16's loss scaling skips such steps)", s.clip, err)
		}
	}
	return stepOrSkip(ctx, s.prog, s.scaler)
}

// clipSkipped reports whether this step has nothing to clip: under -amp fp16 its gradients
// overflowed on some rank, so every rank skips the step (stepOrSkip). optim's clipping
// refuses the non-finite norm of such gradients.
func (s *stepper) clipSkipped(ctx context.Context) (bool, error) {
	if s.clip <= 0 || s.scaler == nil {
		return false, nil
	}
	return s.scaler.FoundInf(ctx)
}

func (s *devSharded) optimizer() optim.Optimizer { return s.e.Optimizer() }

// evalLogits runs an evaluation graph: its Run gathers the units (collective, as zero3's).
func (s *devSharded) evalLogits(ctx context.Context, b *data.Batch) ([]float32, error) {
	return runEval(ctx, s.cfg, s.evals, s.shape, b, func(build nn.BuildFunc) (evalProgram, error) { return s.e.Compile(build, s.evalOpt...) })
}

// save and resume are the CPU zero3's (saveShards, resumeShards).
func (s *devSharded) save(ctx context.Context, meta *checkpoint.State) (string, error) {
	return saveShards(ctx, s.g, s.ck, s.scaler, s.e, meta)
}

func (s *devSharded) resume(ctx context.Context, path string, meta *checkpoint.State) (string, error) {
	return resumeShards(s.ck, s.scaler, s.e, path, meta)
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
	var err error
	switch path {
	case "none", "":
		return "", nil
	case "auto":
		path, err = ck.newest(load)
	default:
		err = load(path)
	}
	if err != nil || path == "" {
		return "", err
	}
	meta.Step, meta.Epoch = st.Step, st.Epoch
	return path, nil
}

func (s *devSharded) report(ctx context.Context, cfg *settings, res *Result) error {
	res.ModelStateBytes = s.e.Memory().ModelStateBytes()
	return nil
}
