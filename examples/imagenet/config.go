package main

import (
	"github.com/gorgonia-parallel/gp/parallel/timeline"
	"github.com/gorgonia-parallel/gp/trainer"

	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/optim/gsolver"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	G "gorgonia.org/gorgonia"
)

// Config is a training run. Zero values take the architecture's recipe defaults.
type Config struct {
	Data       string // dataset root (imagefolder: train/ and val/ inside; synthetic: generated there)
	DataFormat string // imagefolder, synthetic, npy, webdataset
	Arch       string
	NumClasses int
	ImageSize  int // training crop (224 for ImageNet); validation resizes to ImageSize*8/7 then crops

	Epochs      int
	Batch       int // global batch size (split across ranks, as PyTorch's main.py does with -b)
	LR          float64
	Momentum    float64
	WeightDecay float64
	Workers     int // loader workers per rank
	Sched       string
	Warmup      int // warmup epochs (linear from 1% of lr)
	Smoothing   float64
	ClipGrad    float64
	Optimizer   string  // sgd or adamw
	MinLR       float64 // the cosine schedule's floor (timm's --min-lr)
	PolyPower   float64 // the poly schedule's power
	PctStart    float64 // the onecycle schedule's rising share
	WarmupLR    float64 // the warmup's first learning rate (timm's --warmup-lr; 0: 1% of LR)
	// StartEpoch starts the run at this epoch, the schedule advanced to its first step, as
	// PyTorch's --start-epoch does (0: the checkpoint's, or the first); a checkpoint of a
	// later step still wins.
	StartEpoch int

	// Augment is the training augmentation and its preset (augment.go).
	Augment Augment
	// GradAccum is how many batches each optimizer step accumulates (timm's
	// --grad-accum-steps): the batch of one step is GradAccum × Batch images.
	GradAccum int
	SyncBN    bool    // BatchNorm statistics over the whole group (ddp/zero SyncBatchNorm)
	DropPath  float64 // stochastic depth of the last block (Swin); negative: the architecture's
	// AMPInitScale is -amp fp16's initial loss scale (0: PyTorch's 2^16).
	AMPInitScale float64
	ModelEMA     bool    // keep an exponential moving average of the weights, evaluated and saved
	EMADecay     float64 // its decay per optimizer step

	// CommHook is DDP's communication hook (-ddp-comm-hook, commhook.go).
	CommHook trainer.CommHookConfig

	Resume     string // a checkpoint path, "auto" (latest in Out, the default) or "none"
	Evaluate   bool
	Pretrained string
	PrintFreq  int
	Seed       int64
	Strategy   string // ddp (the default; also world 1), zero3, dp, none
	DPReplicas int
	AMP        string // "", bf16, fp16
	Device     string // cpu (the default), cuda (this rank's GPU, see deviceOrdinal) or cuda:N
	Offload    string

	Out       string // run directory: checkpoints, metrics.jsonl, curves.png, timelines
	CkptEvery int    // checkpoint every N steps (0: only at epoch ends)
	Keep      int    // checkpoints kept
	MaxSteps  int    // stop after this many steps in total (0: no limit); for tests
	Synthetic SyntheticConfig
	Quiet     bool // no progress bar and no per-print-freq lines (tests)
	// Progress is how training progress is shown: "bar" (a redrawn progress bar: what a
	// terminal wants), "log" (one line per -print-freq steps: what a file or a pipe wants)
	// or "" (bar when out is a terminal, else log).
	Progress string
	// TensorBoard writes a TensorBoard event file into Out (rank 0), beside metrics.jsonl.
	TensorBoard bool
	// TimelineSteps is how many of the most recent steps each rank's timeline keeps and
	// writes to OUT/timeline-rankN.json: 0 takes timeline.DefaultSteps, negative turns the
	// timelines off (no files; the overlap summary is still computed). The -timeline-steps
	// flag takes 0 for off.
	TimelineSteps int
	// BadInput is what opening the data does with samples whose label is out of range
	// (labels against NumClasses): "fail" (the default: an error naming the file, index and
	// value) or "skip" (left out on every rank alike, logged with the path). An image that
	// does not decode stops the run either way, since skipping it would leave that rank's
	// batch short.
	BadInput string
	// Faults are -fail-at-step, -kill-at-step and -kill-rank: crashes on purpose, for
	// fault-injection tests (trainer.Faults).
	trainer.Faults
	// Timeout bounds each collective of the group Run joins (comm.WithTimeout; 0: the
	// GP_COMM_TIMEOUT environment variable, else comm's 30 minutes). A collective that times
	// out fails naming the ranks that had not arrived and the last operation each ran.
	Timeout time.Duration
	// CPUProfile, when set, is where each rank writes a CPU profile of its run, as
	// CPUProfile.rankN (trainer.WithCPUProfile).
	CPUProfile string

	// Group, when set, is the process group to train in (tests run ranks as goroutines);
	// otherwise Run joins the group the torchrun environment describes.
	Group comm.Group

	// Solver, when set, is a gorgonia solver (G.NewAdamSolver(...), ...) that steps the
	// model in place of -opt's optimizer, under -strategy ddp or none on the CPU; one per
	// rank. Its state is checkpointed (optim/gsolver; a solver whose state cannot be
	// captured is refused at the start), -lr (0: the solver's own) and the schedule set its
	// learning rate, and its weight decay is its own (G.WithL2Reg), not -wd's.
	Solver G.Solver `json:"-"`
}

// SyntheticConfig sizes the generated data set of -data-format synthetic.
type SyntheticConfig struct {
	Classes, TrainPer, ValPer, Size int
}

// RegisterFlags binds c's fields to flags named as in PyTorch's examples/imagenet/main.py.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Data, "data", "", "dataset root (imagefolder: DIR/train and DIR/val)")
	fs.StringVar(&c.DataFormat, "data-format", "imagefolder", "imagefolder | synthetic | npy | webdataset | fashion-mnist | idx (MNIST-style IDX files; -data defaults to Debian's /usr/share/datasets/fashion-mnist)")
	fs.StringVar(&c.Arch, "arch", "resnet18", "model architecture: "+strings.Join(models.Archs(), ", ")+", or another CIFAR ResNet resnet<6n+2>")
	fs.StringVar(&c.Arch, "a", "resnet18", "alias of -arch")
	fs.IntVar(&c.NumClasses, "num-classes", 0, "classes (default: the data set's)")
	fs.IntVar(&c.ImageSize, "image-size", 224, "training crop size")
	fs.IntVar(&c.Epochs, "epochs", 90, "number of epochs")
	fs.IntVar(&c.Batch, "b", 256, "global batch size over all ranks")
	fs.IntVar(&c.Batch, "batch-size", 256, "alias of -b")
	fs.Var(hyperFlag{&c.LR, "0: the recipe's"}, "lr", "initial learning rate, >= 0 (default: the recipe's, scaled by batch)")
	fs.Var(hyperFlag{&c.LR, "0: the recipe's"}, "learning-rate", "alias of -lr")
	fs.Float64Var(&c.Momentum, "momentum", 0.9, "SGD momentum")
	c.WeightDecay = -1
	fs.Var(hyperFlag{&c.WeightDecay, ""}, "wd", "weight decay, >= 0 (default: the recipe's)")
	fs.Var(hyperFlag{&c.WeightDecay, ""}, "weight-decay", "alias of -wd")
	fs.IntVar(&c.Workers, "j", 2, "data loading workers per rank")
	fs.IntVar(&c.Workers, "workers", 2, "alias of -j")
	fs.StringVar(&c.Sched, "sched", "", "step | cosine | onecycle | poly | constant (default: the recipe's); onecycle peaks at -lr (PyTorch's OneCycleLR defaults, momentum cycled), poly decays as (1-t/T)^-poly-power, constant holds -lr after the warmup")
	fs.Float64Var(&c.PolyPower, "poly-power", 1, "power of the poly schedule (PyTorch's PolynomialLR default 1)")
	fs.Float64Var(&c.PctStart, "pct-start", 0.3, "share of the steps the onecycle schedule spends rising (PyTorch's default 0.3)")
	fs.IntVar(&c.Warmup, "warmup-epochs", -1, "linear warmup epochs (default: the recipe's)")
	fs.Float64Var(&c.Smoothing, "label-smoothing", -1, "label smoothing (default: the recipe's)")
	fs.Float64Var(&c.ClipGrad, "clip-grad", -1, "clip gradients to this global norm, 0 off (default: the recipe's)")
	fs.StringVar(&c.Optimizer, "opt", "", "sgd | adamw (default: the recipe's)")
	fs.Float64Var(&c.MinLR, "min-lr", 0, "floor of the cosine schedule")
	fs.Float64Var(&c.WarmupLR, "warmup-lr", 0, "learning rate the warmup starts from (default: 1% of -lr)")
	fs.IntVar(&c.StartEpoch, "start-epoch", 0, "epoch to start at (0-based), the schedule advanced to it (default: the checkpoint's)")
	c.Augment.RegisterFlags(fs)
	fs.IntVar(&c.GradAccum, "grad-accum-steps", 1, "batches accumulated per optimizer step")
	fs.BoolVar(&c.SyncBN, "sync-bn", false, "BatchNorm statistics over all ranks (SyncBatchNorm)")
	fs.StringVar(&c.CommHook.Name, "ddp-comm-hook", "none", "DDP communication hook: none | fp16 | bf16 | powersgd (torch's ddp_comm_hooks)")
	fs.IntVar(&c.CommHook.PowerSGDRank, "powersgd-rank", 1, "-ddp-comm-hook powersgd: matrix_approximation_rank")
	fs.IntVar(&c.CommHook.PowerSGDStartIter, "powersgd-start-iter", 1000, "-ddp-comm-hook powersgd: start_powerSGD_iter (plain all-reduce before it; > 1)")
	fs.Float64Var(&c.DropPath, "drop-path", -1, "stochastic depth of the last block, rising linearly from 0 (Swin); -1: the architecture's")
	fs.BoolVar(&c.ModelEMA, "model-ema", false, "keep an exponential moving average of the weights; evaluate and checkpoint it")
	fs.Float64Var(&c.EMADecay, "model-ema-decay", 0.9998, "decay of -model-ema per optimizer step")
	fs.StringVar(&c.Resume, "resume", "auto", "checkpoint to resume from: a path, auto (latest in -out) or none")
	fs.BoolVar(&c.Evaluate, "evaluate", false, "evaluate the model on the validation set and exit")
	fs.BoolVar(&c.Evaluate, "e", false, "alias of -evaluate")
	fs.StringVar(&c.Pretrained, "pretrained", "", "torchvision weights (.npz) to start from")
	fs.IntVar(&c.PrintFreq, "print-freq", 10, "log metrics every N steps")
	fs.IntVar(&c.PrintFreq, "p", 10, "alias of -print-freq")
	fs.Int64Var(&c.Seed, "seed", 0, "seed of initialisation, sampling and augmentation")
	fs.StringVar(&c.Strategy, "strategy", "ddp", "ddp | zero3 | dp | none (none: DDP machinery over a world of one)")
	fs.IntVar(&c.DPReplicas, "dp-replicas", 2, "replicas of -strategy dp")
	fs.StringVar(&c.AMP, "amp", "", "autocast: bf16 | fp16 (default off)")
	fs.Float64Var(&c.AMPInitScale, "amp-init-scale", 0, "initial loss scale of -amp fp16's GradScaler (0: 65536)")
	fs.StringVar(&c.Device, "device", "cpu", "cpu | cuda | cuda:N (cuda: the GPU of LOCAL_RANK, one process per GPU; every -strategy: ddp and zero3 reduce with NCCL on the device, dp spreads -dp-replicas over this process's GPUs)")
	fs.StringVar(&c.Offload, "offload", "", "ZeRO-3 offload of the shard and optimizer state: cpu | disk (needs -opt adamw)")
	fs.StringVar(&c.Out, "out", "", "run directory (default runs/ARCH)")
	fs.IntVar(&c.CkptEvery, "ckpt-every", 0, "also checkpoint every N steps")
	fs.IntVar(&c.Keep, "keep", 3, "checkpoints to keep")
	fs.IntVar(&c.MaxSteps, "max-steps", 0, "stop after N steps in total (0: no limit)")
	fs.IntVar(&c.Synthetic.Classes, "synthetic-classes", 10, "classes of the generated data set")
	fs.IntVar(&c.Synthetic.TrainPer, "synthetic-train", 300, "training images per class of the generated data set")
	fs.IntVar(&c.Synthetic.ValPer, "synthetic-val", 50, "validation images per class of the generated data set")
	fs.IntVar(&c.Synthetic.Size, "synthetic-size", 40, "side of the generated images")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress bar and no per-print-freq lines")
	fs.StringVar(&c.Progress, "progress", "", "bar | log (default: bar on a terminal, one line per -print-freq otherwise)")
	fs.BoolVar(&c.TensorBoard, "tensorboard", true, "write TensorBoard event files (scalars) into OUT, beside metrics.jsonl")
	c.TimelineSteps = timeline.DefaultSteps
	fs.Var(timelineStepsFlag{&c.TimelineSteps}, "timeline-steps",
		"keep and write the timeline events of the last N steps per rank (0: no timelines)")
	fs.StringVar(&c.BadInput, "bad-input", "fail", "samples with out-of-range labels: fail | skip (left out on every rank, logged)")
	fs.Int64Var(&c.FailAtStep, "fail-at-step", 0, "exit with status 3 after this step in the first attempt (fault-injection tests)")
	fs.Int64Var(&c.KillAtStep, "kill-at-step", 0, "rank -kill-rank sends itself SIGKILL during this step in the first attempt (fault-injection tests)")
	fs.IntVar(&c.KillRank, "kill-rank", 0, "the rank -kill-at-step kills")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write each rank's CPU profile to FILE.rankN (go tool pprof reads it)")
	fs.DurationVar(&c.Timeout, "timeout", 0, "timeout of each collective, like 10m (default: GP_COMM_TIMEOUT, else 30m)")
}

// hyperFlag is a float flag that refuses a negative, NaN or Inf value, as PyTorch's
// optimizers refuse a negative learning rate or weight decay; the flag package names the
// flag in the error. Config's negative value (the flag's default) is "the recipe's", which
// the flag shows as no default.
type hyperFlag struct {
	p    *float64
	zero string // what 0 means, when not 0 itself
}

func (f hyperFlag) String() string {
	if f.p == nil || *f.p < 0 || (*f.p == 0 && f.zero != "") {
		return ""
	}
	return strconv.FormatFloat(*f.p, 'g', -1, 64)
}

func (f hyperFlag) Set(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return err
	}
	if !(x >= 0) || math.IsInf(x, 0) {
		if f.zero != "" {
			return fmt.Errorf("want a finite number >= 0 (%s)", f.zero)
		}
		return errors.New("want a finite number >= 0")
	}
	*f.p = x
	return nil
}

// timelineStepsFlag is -timeline-steps: the flag's 0 (off) is Config's negative, since
// Config's zero value means the default.
type timelineStepsFlag struct{ p *int }

func (f timelineStepsFlag) String() string {
	if f.p == nil || *f.p == 0 {
		return strconv.Itoa(timeline.DefaultSteps)
	}
	return strconv.Itoa(max(*f.p, 0))
}

func (f timelineStepsFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("want a number of steps >= 0, got %q", v)
	}
	if n == 0 {
		n = -1
	}
	*f.p = n
	return nil
}

// recipe fills what the user left at its zero value with the architecture's defaults:
// ResNet trains with SGD (lr 0.1 per 256 images, weight decay 1e-4, step decay every 30
// epochs), Swin with AdamW (lr 1e-3 per 1024 images, weight decay 0.05, cosine with 20
// warmup epochs, label smoothing 0.1, gradient clipping at 5).
func (c *Config) recipe() error {
	if err := c.checkInputs(); err != nil {
		return err
	}
	swin := strings.HasPrefix(c.Arch, "swin")
	c.archDefaults(swin)
	if err := c.Augment.resolve(c.DataFormat, c.ImageSize); err != nil {
		return err
	}
	if c.GradAccum <= 0 {
		c.GradAccum = 1
	}
	if c.WarmupLR <= 0 {
		c.WarmupLR = 0.01 * c.LR
	}
	if c.EMADecay == 0 {
		c.EMADecay = 0.9998
	}
	if c.Out == "" {
		c.Out = "runs/" + c.Arch
	}
	if c.Keep <= 0 {
		c.Keep = 1
	}
	if c.PrintFreq <= 0 {
		c.PrintFreq = 10
	}
	return c.checkRecipe(swin)
}

// checkInputs refuses what no recipe can fix: an unknown -arch, a gorgonia solver that
// cannot be stepped or checkpointed, a learning rate or weight decay out of range, a device
// or communication hook that does not open.
func (c *Config) checkInputs() error {
	if !slices.Contains(models.Archs(), c.Arch) && !resnet.IsCIFAR(c.Arch) {
		_, err := models.New(c.Arch, 0)
		return fmt.Errorf("trainer: -arch: %w", err)
	}
	if c.Solver != nil && c.LR == 0 {
		// A learning rate left at 0 is the solver's own.
		st, err := gsolver.Of(c.Solver)
		if err != nil {
			return fmt.Errorf("trainer: Config.Solver: %w", err)
		}
		c.LR = st.LR()
	}
	if !(c.LR >= 0) || math.IsInf(c.LR, 0) {
		return fmt.Errorf("trainer: -lr %g: want a finite number >= 0 (0: the recipe's)", c.LR)
	}
	if math.IsNaN(c.WeightDecay) || math.IsInf(c.WeightDecay, 0) {
		return fmt.Errorf("trainer: -wd %g: want a finite number >= 0", c.WeightDecay)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("trainer: -timeout %v is negative", c.Timeout)
	}
	if c.Device != "" && c.Device != "cpu" && c.Strategy == "zero3" && c.Optimizer == "" {
		// ZeRO-3 on the device steps AdamW: it is the recipe's optimizer there (the recipe
		// fills c.Optimizer only when it is empty); an explicit -opt sgd is refused when the
		// engine is made.
		c.Optimizer = "adamw"
	}
	return nil
}

// archDefaults fills what the user left unset with the architecture family's recipe.
func (c *Config) archDefaults(swin bool) {
	// Negative means "the recipe's" (the flags' defaults); a learning rate of 0 too (-lr
	// refuses a negative one).
	set := func(v *float64, def float64) {
		if *v < 0 {
			*v = def
		}
	}
	if c.LR == 0 {
		c.LR = -1
	}
	if swin {
		if c.Optimizer == "" {
			c.Optimizer = "adamw"
		}
		set(&c.LR, 1e-3*float64(c.Batch)/1024)
		set(&c.WeightDecay, 0.05)
		if c.Sched == "" {
			c.Sched = "cosine"
		}
		if c.Warmup < 0 {
			c.Warmup = min(20, c.Epochs/10)
		}
		set(&c.Smoothing, 0.1)
		set(&c.ClipGrad, 5)
		return
	}
	if c.Optimizer == "" {
		c.Optimizer = "sgd"
	}
	set(&c.LR, 0.1*float64(c.Batch)/256)
	set(&c.WeightDecay, 1e-4)
	if c.Sched == "" {
		c.Sched = "step"
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	}
	set(&c.Smoothing, 0)
	set(&c.ClipGrad, 0)
}

// checkRecipe checks the options once the recipe has filled them in.
func (c *Config) checkRecipe(swin bool) error {
	if c.MinLR < 0 || c.MinLR > c.LR {
		return fmt.Errorf("trainer: -min-lr %g: want it in [0, lr %g]", c.MinLR, c.LR)
	}
	if c.ModelEMA && !(c.EMADecay > 0 && c.EMADecay < 1) {
		return fmt.Errorf("trainer: -model-ema-decay %g: want it in (0, 1)", c.EMADecay)
	}
	if c.DropPath > 0 && !swin {
		return fmt.Errorf("trainer: -drop-path: %s has no stochastic depth (the Swin models have)", c.Arch)
	}
	if c.DropPath > 1 {
		return fmt.Errorf("trainer: -drop-path %g: want it in [0, 1]", c.DropPath)
	}
	switch c.Progress {
	case "", "bar", "log":
	default:
		return fmt.Errorf("trainer: unknown -progress %q (bar or log)", c.Progress)
	}
	switch c.Sched {
	case "step", "cosine", "poly", "constant":
	case "onecycle":
		if c.Warmup > 0 {
			return fmt.Errorf("trainer: -sched onecycle has its own rise (-pct-start): drop -warmup-epochs %d", c.Warmup)
		}
	default:
		return fmt.Errorf("trainer: unknown -sched %q (step, cosine, onecycle, poly or constant)", c.Sched)
	}
	switch c.Optimizer {
	case "sgd", "adamw":
	default:
		return fmt.Errorf("trainer: unknown -opt %q (sgd or adamw)", c.Optimizer)
	}
	return nil
}
