package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	G "gorgonia.org/gorgonia"
)

// Result summarises a finished run.
type Result struct {
	Steps      int64
	Epochs     int
	FinalLoss  float64
	Top1, Top5 float64 // last validation accuracy, percent
	Evaluated  bool    // a validation ran (Top1 and Top5 are its)
	// EMATop1 and EMATop5 are the last validation accuracy of the weights' moving average
	// (-model-ema), percent.
	EMATop1, EMATop5 float64
	ImgsPerS         float64 // training images per second over all ranks
	OverlapFrac      float64 // fraction of all-reduce time hidden behind backward (DDP)
	RSSBytes         []float64
	// ModelStateBytes is what this rank holds of parameters, gradients and optimizer state
	// between steps (ZeRO-3 only; a replicated rank holds 16 bytes per parameter under AdamW).
	ModelStateBytes int64
	// LossHistory is this rank's training loss of each of the last (at most)
	// LossHistorySteps steps of this run, oldest first: a bounded tail (32 KiB), since a run
	// may take millions of steps; metrics.jsonl has every logged step.
	LossHistory []float64
	ResumedFrom string
	// StartStep is the step this run started from: its checkpoint's (or -start-epoch's), 0
	// from scratch. Steps - StartStep steps were taken by this run.
	StartStep   int64
	Checkpoint  string
	MetricsPath string
	PlotPath    string // "" when no plot was written
	// TensorBoardPath is the event file rank 0 wrote (-tensorboard), "" when none.
	TensorBoardPath string
	TimelinePaths   []string
}

// LossHistorySteps bounds Result.LossHistory.
const LossHistorySteps = 4096

// Run trains (or, with Evaluate, evaluates) as cfg says. It joins the process group the
// torchrun environment describes (one process when WORLD_SIZE is unset). Progress goes to
// out on rank 0.
//
// When Run fails on this rank alone (a bad image, a full disk), it aborts the group it
// joined with its error (comm.Abort), so that the other ranks' collectives fail at once
// naming this rank and the error instead of waiting for it; a group passed in cfg.Group is
// the caller's to abort or close.
func Run(ctx context.Context, cfg Config, out io.Writer) (_ *Result, err error) {
	if err := cfg.recipe(); err != nil {
		return nil, err
	}
	strat, err := strategyOf(cfg.Strategy)
	if err != nil {
		return nil, err
	}
	g := cfg.Group
	if g == nil {
		if g, err = joinGroup(ctx, cfg.commOptions()...); err != nil {
			return nil, err
		}
		defer func() { leaveGroup(g, err) }()
	}
	r, err := newRun(ctx, &cfg, strat, g, out)
	if err != nil {
		return nil, err
	}
	if cfg.Evaluate {
		return r.evaluateOnly(ctx)
	}
	if err := r.openOutputs(); err != nil {
		return nil, err
	}
	defer r.closeOutputs()
	return r.trainAll(ctx)
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

// keepLast trims h to its last n values once it holds 2n, so that appending to it one value
// at a time costs amortised O(1) and holds at most 2n; the caller trims the final result.
func keepLast(h []float64, n int) []float64 {
	if len(h) < 2*n {
		return h
	}
	return append(h[:0], h[len(h)-n:]...)
}

// buildFor builds the classification graph for a batch of n images: inputs "images"
// [n,c,h,w] and "labels" [n], output "logits", and in train mode the cross-entropy loss,
// multiplied by the loss scale when a scaler is given. With soft set (mixup, cutmix) the
// training graph takes "targets" [n,classes] instead of "labels" and the loss is the
// cross-entropy against them (label smoothing is in the targets).
func buildFor(n, c, h, w int, smoothing float64, soft bool, classes int, scaler *amp.GradScaler) nn.BuildFunc {
	classify := nn.Classify(n, []int{c, h, w}, smoothing)
	if soft {
		classify = classifySoft(n, []int{c, h, w}, classes)
	}
	if scaler == nil {
		return classify
	}
	return func(b *nn.Builder) (*G.Node, error) {
		loss, err := classify(b)
		if err != nil || loss == nil {
			return loss, err
		}
		return scaler.ScaleLoss(b, loss)
	}
}

// classifySoft is nn.Classify with soft targets: inputs "images" [batch, shape...] and, in
// train mode, "targets" [batch, classes]; output "logits"; loss ops.SoftCrossEntropy.
func classifySoft(batch int, shape []int, classes int) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", append([]int{batch}, shape...)...)
		if err != nil {
			return nil, err
		}
		if !b.Training() {
			logits, err := b.Forward(x)
			if err == nil {
				b.Output("logits", logits)
			}
			return nil, err
		}
		t, err := b.Input("targets", batch, classes)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(x)
		if err != nil {
			return nil, err
		}
		b.Output("logits", logits)
		return ops.SoftCrossEntropy(logits, t)
	}
}

// fillInputs copies a batch into the inputs that input returns.
func fillInputs(input func(string) ([]float32, error), b *data.Batch) error {
	x, err := input("images")
	if err != nil {
		return err
	}
	if len(x) != b.N*b.C*b.H*b.W {
		return fmt.Errorf("trainer: the graph's images input holds %d values, the batch %d", len(x), b.N*b.C*b.H*b.W)
	}
	copy(x, b.Images)
	y, err := input("labels")
	if err != nil {
		return err
	}
	for i := range y {
		y[i] = float32(b.Labels[i])
	}
	return nil
}

// leaveGroup closes g after a run that succeeded and aborts it with err after one that
// failed. It does not use Run's context, which may be what ended the run.
func leaveGroup(g comm.Group, err error) {
	if err != nil {
		comm.Abort(context.Background(), g, err)
		return
	}
	g.Close(context.Background())
}

// joinGroup joins the job's process group, or makes a group of one without WORLD_SIZE (or
// mpirun's OMPI_COMM_WORLD_SIZE).
func joinGroup(ctx context.Context, opts ...comm.Option) (comm.Group, error) {
	if os.Getenv("WORLD_SIZE") == "" && os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		return comm.NewLocalGroups(1)[0], nil
	}
	return comm.InitFromEnv(ctx, opts...)
}

// rngState adapts the model's dropout RNG to checkpoint.RNG.
type rngState struct{ r *ops.RNG }

func (s rngState) MarshalBinary() ([]byte, error) {
	seed, ctr := s.r.State()
	b := make([]byte, 16)
	for i := 0; i < 8; i++ {
		b[i] = byte(seed >> (8 * i))
		b[8+i] = byte(ctr >> (8 * i))
	}
	return b, nil
}

func (s rngState) UnmarshalBinary(b []byte) error {
	if len(b) != 16 {
		return errors.New("trainer: dropout RNG state must be 16 bytes")
	}
	var seed, ctr uint64
	for i := 0; i < 8; i++ {
		seed |= uint64(b[i]) << (8 * i)
		ctr |= uint64(b[8+i]) << (8 * i)
	}
	s.r.SetState(seed, ctr)
	return nil
}
