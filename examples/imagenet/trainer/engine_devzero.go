package trainer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
)

// devSharded is -strategy zero3 -device cuda: cuda/devzero on this rank's GPU, the units
// all-gathered and the gradients reduce-scattered by NCCL on the device, AdamW on the
// rank's shard on the device or, with -offload cpu, on the CPU. -amp bf16 is autocast in
// the graph. What works on host gradients (-amp fp16, -clip-grad, -grad-accum-steps,
// -sync-bn) is not on the device yet and is refused, naming the flag. Checkpoints hold the gathered parameters and the trainer's
// state, not the optimizer's moments, so a run cannot resume from them yet (an error says
// so).
type devSharded struct {
	stepper
	cfg     *Config
	g       comm.Group
	model   *nn.Model
	e       *devzero.Engine
	opt     optim.Optimizer
	evals   map[int]*devzero.Program
	evalOpt []nn.BuildOption
	shape   [3]int
	ck      *checkpoints
}

func newDeviceShardedEngine(ctx context.Context, cfg *Config, g comm.Group, model *nn.Model, shape [3]int, log *slog.Logger) (engine, error) {
	dev := cfg.Device
	switch {
	case cfg.Optimizer != "adamw":
		return nil, fmt.Errorf("trainer: -strategy zero3 -device %s steps AdamW on the device: pass -opt adamw", dev)
	case cfg.AMP == "fp16":
		return nil, fmt.Errorf("trainer: -amp fp16 with -strategy zero3 -device %s is not yet on the device (issue 20, item 2)", dev)
	case cfg.ClipGrad > 0, cfg.GradAccum > 1, cfg.SyncBN:
		return nil, fmt.Errorf("trainer: -clip-grad, -grad-accum-steps and -sync-bn with -strategy zero3 -device %s are not yet on the device (issue 20, item 2)", dev)
	}
	store := comm.StoreOf(g)
	if store == nil {
		return nil, fmt.Errorf("trainer: -strategy zero3 -device %s needs the rendezvous store of a launched job (gprun or torchrun) to make its NCCL group", dev)
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
	nopts := []nccl.Option{nccl.WithDevice(cfg.dev.Ordinal()), nccl.WithName("trainer-zero3")}
	if cfg.Timeout > 0 {
		nopts = append(nopts, nccl.WithTimeout(cfg.Timeout))
	}
	// The group lives as long as the process, as compileOn's.
	ng, err := nccl.New(ctx, store, g.Rank(), g.Size(), nopts...)
	if err != nil {
		return nil, fmt.Errorf("trainer: -device %s: NCCL group: %w", dev, err)
	}
	var zopts []devzero.Option
	if cfg.Offload == "cpu" {
		zopts = append(zopts, devzero.WithOffloadCPU())
	}
	e, err := devzero.New(cfg.dev, model, ng, opt, zopts...)
	if err != nil {
		return nil, fmt.Errorf("trainer: -device %s: %w", dev, err)
	}
	// -amp bf16 is autocast in the graph (cuda/tape computes its ops in 16 bits); no scaler.
	bopts, _, err := precision(cfg, g)
	if err != nil {
		e.Close()
		return nil, err
	}
	prog, err := e.Compile(buildFor(cfg.Batch/g.Size(), shape[0], shape[1], shape[2], cfg.Smoothing, cfg.Augment.mixing(), cfg.NumClasses, nil), bopts...)
	if err != nil {
		e.Close()
		return nil, err
	}
	return &devSharded{
		stepper: stepper{prog: prog, grads: func() []float32 { return nil }, mix: newMixer(cfg, g.Rank())},
		cfg:     cfg, g: g, model: model, e: e, opt: opt, evals: map[int]*devzero.Program{},
		evalOpt: append([]nn.BuildOption{nn.Training(false)}, bopts...), shape: shape,
		ck: &checkpoints{dir: cfg.Out, keep: cfg.Keep, log: log}}, nil
}

func (s *devSharded) trainStep(ctx context.Context, b *data.Batch, at micro) (float32, error) {
	return s.run(ctx, b, at)
}

func (s *devSharded) optimizer() optim.Optimizer { return s.opt }

// evalLogits runs an evaluation graph: its Run gathers the units (collective, as zero3's).
func (s *devSharded) evalLogits(ctx context.Context, b *data.Batch) ([]float32, error) {
	p, ok := s.evals[b.N]
	if !ok {
		var err error
		if p, err = s.e.Compile(buildFor(b.N, s.shape[0], s.shape[1], s.shape[2], 0, false, 0, nil), s.evalOpt...); err != nil {
			return nil, err
		}
		s.evals[b.N] = p
	}
	if err := fillInputs(p.Input, b); err != nil {
		return nil, err
	}
	if err := p.Run(ctx); err != nil {
		return nil, err
	}
	return p.Output("logits")
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

func (s *devSharded) report(ctx context.Context, cfg *Config, res *Result) error {
	m := s.e.Memory()
	res.ModelStateBytes = int64(m.ShardParams + m.ShardGrads + m.OptimizerDevice + m.OptimizerHost)
	return nil
}
