package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
	G "gorgonia.org/gorgonia"
)

// Result is what a Fit or Validate returns: the same on every rank except where a field
// says "this rank" (and the paths, which rank 0 wrote).
type Result struct {
	Steps      int64   // optimizer steps taken in all (this run's and before its checkpoint)
	Epochs     int     // epochs entered (the last may be partial under WithMaxSteps)
	FinalLoss  float64 // the last epoch's mean training loss over ranks
	Top1, Top5 float64 // last validation accuracy, percent
	Evaluated  bool    // a validation ran (Top1 and Top5 are its)
	// EMATop1 and EMATop5 are the last validation accuracy of the weights' moving average
	// (WithEMA), percent.
	EMATop1, EMATop5 float64
	ImgsPerS         float64   // training images per second over all ranks
	OverlapFrac      float64   // fraction of all-reduce time hidden behind backward (DDP)
	RSSBytes         []float64 // each rank's peak resident memory, bytes
	// ModelStateBytes is what this rank holds of parameters, gradients and optimizer state
	// between steps (ZeRO-3 only; a replicated rank holds 16 bytes per parameter under AdamW).
	ModelStateBytes int64
	// LossHistory is this rank's training loss of each of the last (at most)
	// LossHistorySteps steps of this run, oldest first: a bounded tail (32 KiB), since a run
	// may take millions of steps; metrics.jsonl has every logged step.
	LossHistory []float64
	ResumedFrom string // the checkpoint this run started from, "" from scratch
	// StartStep is the step this run started from: its checkpoint's (or WithStartEpoch's), 0
	// from scratch. Steps - StartStep steps were taken by this run.
	StartStep   int64
	Checkpoint  string // the last checkpoint written
	MetricsPath string // metrics.jsonl (rank 0)
	PlotPath    string // "" when no plot was written
	// TensorBoardPath is the event file rank 0 wrote (WithTensorBoard), "" when none.
	TensorBoardPath string
	TimelinePaths   []string // every rank's timeline and the merged one; nil without
}

// LossHistorySteps bounds Result.LossHistory.
const LossHistorySteps = 4096

// keepLast trims h to its last n values once it holds 2n, so that appending to it one value
// at a time costs amortised O(1) and holds at most 2n; the caller trims the final result.
func keepLast(h []float64, n int) []float64 {
	if len(h) < 2*n {
		return h
	}
	return append(h[:0], h[len(h)-n:]...)
}

// buildFor is the training graph of the model for a batch of n images per program: the
// classification graph (classify) with the settings' label smoothing and, mixing, soft
// targets, its loss multiplied by the loss scale when scaler is given.
func (s *settings) buildFor(n int, shape [3]int, scaler *amp.GradScaler) nn.BuildFunc {
	build := classify(n, shape, s.Smoothing, s.Mix.on(), s.NumClasses, s.fwd)
	if scaler == nil {
		return build
	}
	return func(b *nn.Builder) (*G.Node, error) {
		loss, err := build(b)
		if err != nil || loss == nil {
			return loss, err
		}
		return scaler.ScaleLoss(b, loss)
	}
}

// buildEval is the evaluation graph for a batch of n images: logits, and labels fed.
func (s *settings) buildEval(n int, shape [3]int) nn.BuildFunc {
	return classify(n, shape, 0, false, s.NumClasses, s.fwd)
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
// mpirun's OMPI_COMM_WORLD_SIZE). In a job of several ranks it first lowers the runtime's
// monitor thread, for the program (see the package doc).
func joinGroup(ctx context.Context, opts ...comm.Option) (comm.Group, error) {
	if os.Getenv("WORLD_SIZE") == "" && os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		return comm.NewLocalGroups(1)[0], nil
	}
	if _, world := launchenv.Launched(); world > 1 {
		if _, err := sysmon.Lower(); err != nil {
			return nil, fmt.Errorf("trainer: %w", err)
		}
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
