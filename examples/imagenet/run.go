package main

import (
	"github.com/gorgonia-parallel/gp/trainer"

	"context"
	"fmt"
	"io"
	"strings"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
)

// Run trains (or, with Evaluate, evaluates) as cfg says, with a Trainer of cfg's options
// (after the recipe has filled in what cfg left unset) on cfg's architecture and data set.
// It joins the process group the torchrun environment describes (one process when
// WORLD_SIZE is unset) unless cfg.Group is set. Progress goes to out on rank 0.
func Run(ctx context.Context, cfg Config, out io.Writer) (*trainer.Result, error) {
	if err := cfg.recipe(); err != nil {
		return nil, err
	}
	t, err := trainer.New(cfg.options(out)...)
	if err != nil {
		return nil, err
	}
	src := configSource{&cfg}
	if cfg.Evaluate {
		return t.Validate(ctx, cfg.model(), src)
	}
	return t.Fit(ctx, cfg.model(), src)
}

// options are the Trainer options of a Config the recipe has filled in.
func (c *Config) options(out io.Writer) []trainer.Option {
	opt := trainer.SGD(c.LR, c.Momentum)
	switch {
	case c.Solver != nil:
		opt = trainer.Solver(c.Solver).WithLR(c.LR)
	case c.Optimizer == "adamw":
		opt = trainer.AdamW(c.LR)
	}
	progress, resume := c.Progress, c.Resume
	if c.Quiet {
		progress = "off"
	}
	if resume == "" {
		resume = "none"
	}
	opts := []trainer.Option{trainer.WithEpochs(c.Epochs), trainer.WithBatchSize(c.Batch), trainer.WithGradAccum(c.GradAccum), trainer.WithMaxSteps(c.MaxSteps),
		trainer.WithStartEpoch(c.StartEpoch), trainer.WithClasses(c.NumClasses), trainer.WithSeed(c.Seed),
		trainer.WithOptimizer(opt), trainer.WithWeightDecay(c.WeightDecay),
		trainer.WithSchedule(trainer.Schedule{Name: c.Sched, WarmupEpochs: c.Warmup, WarmupLR: c.WarmupLR, MinLR: c.MinLR, PolyPower: c.PolyPower, PctStart: c.PctStart}),
		trainer.WithLabelSmoothing(c.Smoothing), trainer.WithClipGrad(c.ClipGrad), trainer.WithMixup(c.Augment.mixup()), trainer.WithAutocast(c.AMP, c.AMPInitScale),
		trainer.WithCommHook(c.CommHook), trainer.WithStrategy(c.Strategy), trainer.WithReplicas(max(c.DPReplicas, 1)), trainer.WithDevice(c.Device), trainer.WithOffload(c.Offload),
		trainer.WithDir(c.Out), trainer.WithCheckpoints(c.CkptEvery, c.Keep), trainer.WithResume(resume), trainer.WithOutput(out), trainer.WithProgress(progress, c.PrintFreq),
		trainer.WithTensorBoard(c.TensorBoard), trainer.WithTimeout(c.Timeout), trainer.WithCPUProfile(c.CPUProfile)}
	if c.SyncBN {
		opts = append(opts, trainer.WithSyncBatchNorm())
	}
	if c.ModelEMA {
		opts = append(opts, trainer.WithEMA(c.EMADecay))
	}
	if c.TimelineSteps != 0 {
		opts = append(opts, trainer.WithTimelines(max(c.TimelineSteps, 0)))
	}
	if c.Group != nil {
		opts = append(opts, trainer.WithGroup(c.Group))
	}
	if cb, ok := c.Faults.Callback(); ok {
		opts = append(opts, trainer.WithCallback(cb))
	}
	return opts
}

// model is -arch's model for the data's classes (newModule) with -pretrained's weights.
func (c *Config) model() trainer.Model {
	m := trainer.ModuleFor(func(classes int) (nn.Module, error) {
		k := *c
		k.NumClasses = classes
		return newModule(&k)
	}).Named(c.Arch)
	if path := c.Pretrained; path != "" {
		m = m.Init(func(ps *nn.ParamSet) error {
			if err := models.LoadWeights(ps, path); err != nil {
				return fmt.Errorf("-pretrained %s: %w", path, err)
			}
			return nil
		})
	}
	return m
}

// configSource is a Config's data set (-data, -data-format) as a Source.
type configSource struct{ c *Config }

func (s configSource) Open(ctx context.Context, env trainer.Env) (*trainer.Split, *trainer.Split, error) {
	return openData(ctx, env, s.c)
}

// newModule builds cfg's architecture; -drop-path sets a Swin's stochastic depth.
func newModule(cfg *Config) (nn.Module, error) {
	if cfg.DropPath < 0 || !strings.HasPrefix(cfg.Arch, "swin") {
		return models.New(cfg.Arch, cfg.NumClasses)
	}
	c, err := swin.Arch(cfg.Arch, cfg.NumClasses)
	if err != nil {
		return nil, err
	}
	c.StochasticDepth = cfg.DropPath
	return swin.New(c)
}
