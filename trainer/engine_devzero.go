package trainer

import (
	"context"
	"fmt"
	"log/slog"
	"math"

	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// devSharded is -strategy zero3 -device cuda: cuda/devzero on this rank's GPU, the units
// all-gathered and the gradients reduce-scattered by NCCL on the device, AdamW on the
// rank's shard on the device or, with -offload cpu, on the CPU (AdamW is the default optimizer
// there; -opt sgd is refused). At world size 1 without a launcher the NCCL group is one
// rank's (deviceGroup). -amp is autocast in the
// graph; -amp fp16's unscale and inf/NaN check, -clip-grad and -grad-accum-steps' 1/A work
// on each rank's gradient shard (update). -sync-bn is not on the device yet and is
// refused. Checkpoints hold the gathered parameters and the trainer's
// state, not the optimizer's moments, so a run cannot resume from them yet (an error says
// so).
type devSharded struct {
	stepper
	cfg     *settings
	g       comm.Group
	model   *nn.Model
	e       *devzero.Engine
	opt     optim.Optimizer
	evals   map[int]evalProgram
	evalOpt []nn.BuildOption
	shape   [3]int
	ck      *checkpoints
}

func newDeviceShardedEngine(ctx context.Context, cfg *settings, g comm.Group, model *nn.Model, shape [3]int, log *slog.Logger) (engine, error) {
	dev := cfg.Device
	switch {
	case cfg.Optimizer != "adamw":
		return nil, fmt.Errorf("trainer: -opt %s with -strategy zero3 -device %s is not yet on the device (it steps AdamW on each rank's shard): pass -opt adamw (the default there), or -strategy ddp for -opt %s", cfg.Optimizer, dev, cfg.Optimizer)
	case cfg.SyncBN:
		return nil, fmt.Errorf("trainer: -sync-bn with -strategy zero3 -device %s is not yet on the device: use -strategy ddp -sync-bn, or zero3 without -sync-bn", dev)
	}
	// The shards are cut from each rank's model: rank 0's parameters everywhere first.
	if err := g.Broadcast(comm.F32(model.Params.Data), 0).Wait(ctx); err != nil {
		return nil, fmt.Errorf("trainer: broadcasting the parameters: %w", err)
	}
	segs, err := optim.Segments(model.Params, cfg.WeightDecay)
	if err != nil {
		return nil, err
	}
	opt, err := newOptimizer(cfg, segs)
	if err != nil {
		return nil, err
	}
	ng, err := deviceGroup(ctx, cfg, g, "trainer-zero3")
	if err != nil {
		return nil, err
	}
	var zopts []devzero.Option
	if cfg.Offload == "cpu" {
		zopts = append(zopts, devzero.WithOffloadCPU())
	}
	e, err := devzero.New(cfg.dev, model, ng, opt, zopts...)
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
		cfg: cfg, g: g, model: model, e: e, opt: opt, evals: map[int]evalProgram{},
		evalOpt: append([]nn.BuildOption{nn.Training(false)}, bopts...), shape: shape,
		ck: &checkpoints{dir: cfg.Out, keep: cfg.Keep, log: log}}, nil
}

func (s *devSharded) trainStep(ctx context.Context, b *data.Batch, at micro) (float32, error) {
	return s.run(ctx, b, at)
}

// update is stepper.update on the rank's gradient shard (devzero.Engine's UnscaleGrads,
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
		inf, err := s.e.UnscaleGrads(ctx, s.scaler.Scale())
		if err != nil {
			return fmt.Errorf("trainer: loss scale: %w", err)
		}
		// As updateDevice: +Inf hands the scaler this rank's verdict (the value is discarded).
		flag := []float32{0}
		if inf {
			flag[0] = float32(math.Inf(1))
		}
		s.scaler.Unscale(flag)
	}
	if s.accum > 1 {
		if err := s.e.ScaleGrads(ctx, 1/float32(s.accum)); err != nil {
			return fmt.Errorf("trainer: gradient accumulation: %w", err)
		}
	}
	if s.clip > 0 {
		sum := func(ctx context.Context, sq float64) (float64, error) {
			buf := []float64{sq}
			if err := s.g.AllReduce(comm.F64(buf), comm.Sum).Wait(ctx); err != nil {
				return 0, fmt.Errorf("trainer: gradient norm all-reduce: %w", err)
			}
			return buf[0], nil
		}
		if _, err := s.e.ClipGradNorm(ctx, s.clip, sum); err != nil {
			return fmt.Errorf("trainer: -clip-grad: %w", err)
		}
	}
	return stepOrSkip(ctx, s.prog, s.scaler)
}

func (s *devSharded) optimizer() optim.Optimizer { return s.opt }

// evalLogits runs an evaluation graph: its Run gathers the units (collective, as zero3's).
func (s *devSharded) evalLogits(ctx context.Context, b *data.Batch) ([]float32, error) {
	return runEval(ctx, s.cfg, s.evals, s.shape, b, func(build nn.BuildFunc) (evalProgram, error) { return s.e.Compile(build, s.evalOpt...) })
}

// save gathers the parameters on every rank (collective) and rank 0 writes them with the
// trainer's state; the optimizer's shards are not in it.
func (s *devSharded) save(ctx context.Context, meta *checkpoint.State) (string, error) {
	if err := s.e.ParamsToHost(ctx); err != nil {
		return "", fmt.Errorf("trainer: checkpoint: %w", err)
	}
	if s.g.Rank() != 0 {
		return s.ck.path(meta.Step), nil
	}
	st := *meta
	st.Model = s.model.Params
	return s.ck.save(&st)
}

func (s *devSharded) resume(ctx context.Context, path string, meta *checkpoint.State) (string, error) {
	switch path {
	case "none", "":
		return "", nil
	case "auto":
		p, _, err := s.ck.loadLatest()
		if err != nil || p == "" {
			return "", err
		}
		path = p
	}
	return "", fmt.Errorf("trainer: resume from %s: -strategy zero3 -device %s does not resume yet (its checkpoints lack the optimizer's shards); pass -resume none", path, s.cfg.Device)
}

func (s *devSharded) report(ctx context.Context, cfg *settings, res *Result) error {
	m := s.e.Memory()
	res.ModelStateBytes = int64(m.ShardParams + m.ShardGrads + m.OptimizerDevice + m.OptimizerHost)
	return nil
}
