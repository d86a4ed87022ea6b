package trainer

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/transforms"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	G "gorgonia.org/gorgonia"
)

// runConfig is one test run as the tests vary it: the Trainer's options, an architecture
// (Arch) and an ImageFolder (DATA/train, DATA/val) served by DatasetSource with
// torchvision's ImageNet pipelines at ImageSize. It is JSON, so that a launched test
// binary (TestMain's worker) runs the same Fit. Every field is explicit: nothing is filled
// in from a recipe.
type runConfig struct {
	Data       string
	Arch       string
	NumClasses int
	ImageSize  int

	Epochs, Batch, GradAccum, MaxSteps, StartEpoch int
	LR, Momentum, WeightDecay                      float64
	Workers                                        int
	Optimizer                                      string // sgd or adamw (Solver, when set, wins)
	Sched                                          string
	Warmup                                         int
	Smoothing, ClipGrad                            float64
	Mix                                            Mixup
	SyncBN                                         bool
	AMP                                            string
	AMPInitScale                                   float64
	ModelEMA                                       bool
	EMADecay                                       float64
	CommHook                                       CommHookConfig
	Strategy                                       string
	DPReplicas                                     int
	Device, Offload                                string

	Out             string
	CkptEvery, Keep int
	Resume          string
	PrintFreq       int
	Seed            int64
	Quiet           bool
	TensorBoard     bool
	Evaluate        bool
	Faults          Faults

	Group  comm.Group `json:"-"`
	Solver G.Solver   `json:"-"`
}

// options are c's Trainer options, with progress and the summary going to out.
func (c runConfig) options(out io.Writer) []Option {
	opt := SGD(c.LR, c.Momentum)
	switch {
	case c.Solver != nil:
		opt = Solver(c.Solver).WithLR(c.LR)
	case c.Optimizer == "adamw":
		opt = AdamW(c.LR)
	}
	progress := ""
	if c.Quiet {
		progress = "off"
	}
	opts := []Option{WithEpochs(c.Epochs), WithBatchSize(c.Batch), WithGradAccum(max(c.GradAccum, 1)), WithMaxSteps(c.MaxSteps),
		WithStartEpoch(c.StartEpoch), WithClasses(c.NumClasses), WithSeed(c.Seed),
		WithOptimizer(opt), WithWeightDecay(c.WeightDecay),
		WithSchedule(Schedule{Name: c.Sched, WarmupEpochs: c.Warmup, WarmupLR: 0.01 * c.LR, PolyPower: 1, PctStart: 0.3}),
		WithLabelSmoothing(c.Smoothing), WithClipGrad(c.ClipGrad), WithMixup(c.Mix), WithAutocast(c.AMP, c.AMPInitScale),
		WithCommHook(c.CommHook), WithStrategy(c.Strategy), WithReplicas(max(c.DPReplicas, 1)), WithDevice(c.Device), WithOffload(c.Offload),
		WithDir(c.Out), WithCheckpoints(c.CkptEvery, max(c.Keep, 1)), WithResume(c.Resume), WithOutput(out),
		WithProgress(progress, max(c.PrintFreq, 1)), WithTensorBoard(c.TensorBoard)}
	if c.SyncBN {
		opts = append(opts, WithSyncBatchNorm())
	}
	if c.ModelEMA {
		opts = append(opts, WithEMA(c.EMADecay))
	}
	if c.Group != nil {
		opts = append(opts, WithGroup(c.Group))
	}
	if cb, ok := c.Faults.Callback(); ok {
		opts = append(opts, WithCallback(cb))
	}
	return opts
}

// source is c's ImageFolder: RandomResizedCrop and a horizontal flip for training, a resize
// to ImageSize·8/7 and a centre crop for validation.
func (c runConfig) source() (Source, error) {
	train, err := data.NewImageFolder(filepath.Join(c.Data, "train"), data.WithTransform(transforms.Train(c.ImageSize)),
		data.WithClasses(c.NumClasses))
	if err != nil {
		return nil, err
	}
	val, err := data.NewImageFolder(filepath.Join(c.Data, "val"), data.WithTransform(transforms.Eval(c.ImageSize*8/7, c.ImageSize)),
		data.WithClasses(c.NumClasses))
	if err != nil {
		return nil, err
	}
	if len(train.Classes) != len(val.Classes) {
		return nil, fmt.Errorf("%s: %d training classes, %d validation classes", c.Data, len(train.Classes), len(val.Classes))
	}
	return DatasetSource{Train: train, Val: val, Classes: len(train.Classes), Workers: c.Workers}, nil
}

// fitRun runs c through New and Fit (Validate with c.Evaluate), progress going to out.
func fitRun(ctx context.Context, c runConfig, out io.Writer) (*Result, error) {
	t, err := New(c.options(out)...)
	if err != nil {
		return nil, err
	}
	src, err := c.source()
	if err != nil {
		return nil, err
	}
	if c.Evaluate {
		return t.Validate(ctx, Arch(c.Arch), src)
	}
	return t.Fit(ctx, Arch(c.Arch), src)
}
