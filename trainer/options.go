package trainer

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/optim/gsolver"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
	G "gorgonia.org/gorgonia"
)

// An Option configures a Trainer (New). Options are applied in order; a later one of the
// same kind replaces an earlier one, except WithCallback, which adds.
type Option func(*settings) error

// settings is a Trainer's configuration, every field resolved: the options' values over
// the defaults of defaults().
type settings struct {
	Epochs     int
	Batch      int // global batch size (split across ranks)
	GradAccum  int
	MaxSteps   int
	StartEpoch int

	LR, Momentum, WeightDecay float64
	Optimizer                 string // sgd, adamw, solver, or a custom optimizer's name
	newOpt                    func(segs []optim.Segment, lr float64) (optim.Optimizer, error)
	Solver                    G.Solver
	solver                    *gsolver.State

	Sched                                string
	Warmup                               int
	MinLR, PolyPower, PctStart, WarmupLR float64
	Smoothing, ClipGrad                  float64
	Mix                                  Mixup
	SyncBN                               bool
	AMP                                  string
	AMPInitScale                         float64
	ModelEMA                             bool
	EMADecay                             float64
	CommHook                             CommHookConfig
	Strategy                             string
	DPReplicas                           int
	Device                               string
	dev                                  *cuda.Device
	Offload                              string
	Out                                  string
	CkptEvery, Keep                      int
	Resume                               string
	PrintFreq                            int
	Seed                                 int64
	Quiet                                bool
	Progress                             string
	TensorBoard                          bool
	TimelineSteps                        int
	CPUProfile                           string // WithCPUProfile's path ("" off)
	Timeout                              time.Duration
	Group                                comm.Group
	NumClasses                           int
	fwd                                  ForwardFunc // the model's forward, set by Fit
	out                                  io.Writer
	callbacks                            []Callback
}

// defaults are a Trainer's settings before its options: one epoch of global batch 64, SGD
// at 0.1 with momentum 0.9 and no weight decay, a constant learning rate, DDP on the CPU,
// checkpoints in runs/MODEL (the newest three kept, resumed automatically), a line every 10
// steps to standard output, TensorBoard events and the default timelines.
func defaults() settings {
	return settings{Epochs: 1, Batch: 64, GradAccum: 1, LR: 0.1, Momentum: 0.9, Optimizer: "sgd", Sched: "constant",
		PolyPower: 1, PctStart: 0.3, EMADecay: 0.9998, DPReplicas: 2, Device: "cpu", Keep: 3,
		Resume: "auto", PrintFreq: 10, TensorBoard: true, TimelineSteps: timeline.DefaultSteps, out: os.Stdout}
}

// WithEpochs trains for n epochs (n >= 1; default 1).
func WithEpochs(n int) Option {
	return func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("trainer: WithEpochs(%d): want at least 1", n)
		}
		s.Epochs = n
		return nil
	}
}

// WithBatchSize sets the global batch size, split evenly over the ranks as PyTorch's
// examples/imagenet/main.py splits -b (default 64; it must divide by the world size).
func WithBatchSize(n int) Option {
	return func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("trainer: WithBatchSize(%d): want at least 1", n)
		}
		s.Batch = n
		return nil
	}
}

// WithGradAccum makes each optimizer step accumulate n batches (timm's --grad-accum-steps):
// the step's gradient is that of the mean loss over n × the batch size samples.
func WithGradAccum(n int) Option {
	return func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("trainer: WithGradAccum(%d): want at least 1", n)
		}
		s.GradAccum = n
		return nil
	}
}

// WithMaxSteps stops training after n optimizer steps in all (0: no limit), checkpointing
// the last one so that a later run with a higher limit goes on from there.
func WithMaxSteps(n int) Option {
	return func(s *settings) error {
		if n < 0 {
			return fmt.Errorf("trainer: WithMaxSteps(%d) is negative", n)
		}
		s.MaxSteps = n
		return nil
	}
}

// WithStartEpoch starts at epoch n (0-based) with the schedule advanced to its first step,
// as PyTorch's --start-epoch; a checkpoint of a later step still wins.
func WithStartEpoch(n int) Option {
	return func(s *settings) error {
		if n < 0 {
			return fmt.Errorf("trainer: WithStartEpoch(%d) is negative", n)
		}
		s.StartEpoch = n
		return nil
	}
}

// WithWeightDecay sets the decoupled (AdamW) or L2 (SGD) weight decay of the optimizer,
// applied to weights and not to biases and normalisation parameters (optim.Segments). A
// negative, NaN or infinite value is refused, as PyTorch's optimizers refuse it.
func WithWeightDecay(wd float64) Option {
	return func(s *settings) error {
		if !finiteNonNeg(wd) {
			return fmt.Errorf("trainer: WithWeightDecay(%g): want a finite number >= 0", wd)
		}
		s.WeightDecay = wd
		return nil
	}
}

// WithClasses sets the number of classes of the model and the data (default 0: the
// data's); a data source checks its labels against it.
func WithClasses(n int) Option {
	return func(s *settings) error {
		if n < 0 {
			return fmt.Errorf("trainer: WithClasses(%d) is negative", n)
		}
		s.NumClasses = n
		return nil
	}
}

// WithSeed seeds the initialisation, the samplers, augmentation and dropout (default 0).
func WithSeed(seed int64) Option {
	return func(s *settings) error { s.Seed = seed; return nil }
}

// WithLabelSmoothing sets the cross-entropy's label smoothing, in [0, 1).
func WithLabelSmoothing(eps float64) Option {
	return func(s *settings) error {
		if !(eps >= 0 && eps < 1) {
			return fmt.Errorf("trainer: WithLabelSmoothing(%g): want it in [0, 1)", eps)
		}
		s.Smoothing = eps
		return nil
	}
}

// WithClipGrad scales the gradients so that their global L2 norm is at most maxNorm
// before each optimizer step (torch.nn.utils.clip_grad_norm_; 0 turns it off). Every
// strategy and device clips with optim's rule; a non-finite norm ends the run with an error
// (under fp16 autocast a step that overflowed is skipped instead).
func WithClipGrad(maxNorm float64) Option {
	return func(s *settings) error {
		if !finiteNonNeg(maxNorm) {
			return fmt.Errorf("trainer: WithClipGrad(%g): want a finite number >= 0", maxNorm)
		}
		s.ClipGrad = maxNorm
		return nil
	}
}

// WithSyncBatchNorm computes BatchNorm statistics over the whole group (SyncBatchNorm).
func WithSyncBatchNorm() Option {
	return func(s *settings) error { s.SyncBN = true; return nil }
}

// WithAutocast runs the graphs in 16 bits: "bf16" (PyTorch's CPU autocast, no loss
// scaling) or "fp16" (with a GradScaler starting at initScale, 0 meaning 2^16, whose
// overflow flag every rank agrees on, so that all skip the same steps); "" is off.
func WithAutocast(dtype string, initScale float64) Option {
	return func(s *settings) error {
		switch dtype {
		case "", "bf16", "fp16":
		default:
			return fmt.Errorf("trainer: WithAutocast(%q): want bf16, fp16 or \"\"", dtype)
		}
		if !finiteNonNeg(initScale) {
			return fmt.Errorf("trainer: WithAutocast(%q, %g): want an initial scale >= 0", dtype, initScale)
		}
		s.AMP, s.AMPInitScale = dtype, initScale
		return nil
	}
}

// WithEMA keeps an exponential moving average of the weights (timm's ModelEmaV2) with
// decay in (0, 1) per optimizer step, evaluated beside the weights and checkpointed;
// replicated strategies only.
func WithEMA(decay float64) Option {
	return func(s *settings) error {
		if !(decay > 0 && decay < 1) {
			return fmt.Errorf("trainer: WithEMA(%g): want a decay in (0, 1)", decay)
		}
		s.ModelEMA, s.EMADecay = true, decay
		return nil
	}
}

// WithCommHook sets DDP's communication hook (ddp and none strategies).
func WithCommHook(h CommHookConfig) Option {
	return func(s *settings) error { s.CommHook = h; return nil }
}

// WithStrategy chooses how the ranks share the work: "ddp" (the default; also at world
// size 1), "none" (DDP's machinery over a world of one), "dp" (DataParallel over
// replicas in this process, see WithReplicas) or "zero3" (ZeRO-3: parameters, gradients and
// optimizer state sharded over the ranks).
func WithStrategy(name string) Option {
	return func(s *settings) error {
		if _, err := strategyOf(name); err != nil {
			return err
		}
		s.Strategy = name
		return nil
	}
}

// WithReplicas sets the number of replicas of the dp strategy (default 2).
func WithReplicas(n int) Option {
	return func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("trainer: WithReplicas(%d): want at least 1", n)
		}
		s.DPReplicas = n
		return nil
	}
}

// WithDevice chooses where the graphs run: "cpu" (the default), "cuda" (this rank's GPU:
// LOCAL_RANK's, or the only one CUDA_VISIBLE_DEVICES shows) or "cuda:N". The device opens
// in New, so that a machine without the driver fails before any data is read.
func WithDevice(dev string) Option {
	return func(s *settings) error { s.Device = dev; return nil }
}

// WithOffload moves ZeRO-3's shard and optimizer state to "cpu" or "disk" ("" is off).
func WithOffload(where string) Option {
	return func(s *settings) error {
		switch where {
		case "", "cpu", "disk":
		default:
			return fmt.Errorf("trainer: unknown offload %q (cpu or disk)", where)
		}
		s.Offload = where
		return nil
	}
}

// WithDir sets the run directory: checkpoints, metrics.jsonl, TensorBoard events,
// curves.png and timelines (default runs/MODEL, MODEL the model's name).
func WithDir(dir string) Option {
	return func(s *settings) error { s.Out = dir; return nil }
}

// WithCheckpoints checkpoints every `every` optimizer steps as well as at each epoch's end
// (0: only there) and keeps the newest keep (>= 1) complete checkpoints.
func WithCheckpoints(every, keep int) Option {
	return func(s *settings) error {
		if every < 0 || keep < 1 {
			return fmt.Errorf("trainer: WithCheckpoints(%d, %d): want every >= 0 and keep >= 1", every, keep)
		}
		s.CkptEvery, s.Keep = every, keep
		return nil
	}
}

// WithResume says where training starts: "auto" (the default: the newest checkpoint of
// the run directory that loads completely, or from scratch when there is none), "none"
// (from scratch, beside any checkpoints) or a checkpoint's path.
func WithResume(from string) Option {
	return func(s *settings) error {
		if from == "" {
			return errors.New("trainer: WithResume(\"\"): want auto, none or a checkpoint's path")
		}
		s.Resume = from
		return nil
	}
}

// WithOutput sends rank 0's progress and summary to w (default os.Stdout); other ranks
// print nothing.
func WithOutput(w io.Writer) Option {
	return func(s *settings) error { s.out = w; return nil }
}

// WithProgress shows progress as "bar" (a bar redrawn in place), "log" (a line every
// printFreq steps), "off" (nothing but the epoch lines and the summary) or "" (a bar on a
// terminal, the launcher's included, lines elsewhere); printFreq (>= 1, default 10) is also
// how often metrics.jsonl gets a training record.
func WithProgress(mode string, printFreq int) Option {
	return func(s *settings) error {
		switch mode {
		case "", "bar", "log", "off":
		default:
			return fmt.Errorf("trainer: WithProgress(%q): want bar, log, off or \"\"", mode)
		}
		if printFreq < 1 {
			return fmt.Errorf("trainer: WithProgress(%q, %d): want printFreq >= 1", mode, printFreq)
		}
		s.Progress, s.Quiet, s.PrintFreq = mode, mode == "off", printFreq
		if s.Quiet {
			s.Progress = ""
		}
		return nil
	}
}

// WithTensorBoard turns the TensorBoard event file of the run directory on or off
// (default on).
func WithTensorBoard(on bool) Option {
	return func(s *settings) error { s.TensorBoard = on; return nil }
}

// WithTimelines keeps each rank's events of the last n steps and writes them as
// DIR/timeline-rankN.json and the merged DIR/timeline.json (0: no timelines; default
// timeline.DefaultSteps).
func WithTimelines(n int) Option {
	return func(s *settings) error {
		if n < 0 {
			return fmt.Errorf("trainer: WithTimelines(%d) is negative", n)
		}
		s.TimelineSteps = n
		if n == 0 {
			s.TimelineSteps = -1
		}
		return nil
	}
}

// WithGroup trains in g instead of the group the torchrun environment describes (tests run
// ranks as goroutines over comm.NewLocalGroups). The group stays the caller's to close or
// abort.
func WithGroup(g comm.Group) Option {
	return func(s *settings) error { s.Group = g; return nil }
}

// WithTimeout bounds each collective of the group Fit joins (comm.WithTimeout; default
// GP_COMM_TIMEOUT, else comm's).
func WithTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("trainer: WithTimeout(%v) is negative", d)
		}
		s.Timeout = d
		return nil
	}
}

// WithCallback adds cb, run on every rank at the points its fields name (see Callback).
// Callbacks run in the order they were added.
func WithCallback(cb Callback) Option {
	return func(s *settings) error { s.callbacks = append(s.callbacks, cb); return nil }
}

func finiteNonNeg(x float64) bool { return x >= 0 && !math.IsInf(x, 0) }

// commOptions are the options of the process group Fit joins.
func (s *settings) commOptions() []comm.Option {
	if s.Timeout > 0 {
		return []comm.Option{comm.WithTimeout(s.Timeout)}
	}
	return nil
}
