package trainer

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// engine is a training strategy: where the parameters, gradients and optimizer state live,
// how a step reduces gradients, and how checkpoints are written and read.
type engine interface {
	// trainStep runs forward and backward on b, adding to the gradients; after the last
	// batch of an optimizer step (at.last) they are reduced and ready for update. It
	// returns the loss of this rank's batch (unscaled).
	trainStep(ctx context.Context, b *data.Batch, at micro) (float32, error)
	// update unscales and clips the gradients, steps the optimizer (skipping a step whose
	// gradients overflowed, under fp16) and updates the loss scale.
	update(ctx context.Context) error
	// optimizer is the optimizer the learning-rate schedule drives.
	optimizer() optim.Optimizer
	// evalLogits runs the evaluation graph on b and returns its logits [b.N, classes].
	evalLogits(ctx context.Context, b *data.Batch) ([]float32, error)
	// save writes a checkpoint of the engine's state and of meta (schedule, step, epoch,
	// RNG, loss scale). Every rank calls it.
	save(ctx context.Context, meta *checkpoint.State) (string, error)
	// resume loads path, or with path "auto" the newest readable checkpoint, into the engine
	// and meta; it returns the checkpoint read, or "" when there is none.
	resume(ctx context.Context, path string, meta *checkpoint.State) (string, error)
	// report adds the strategy's end-of-run figures (overlap, timelines) to res.
	report(ctx context.Context, cfg *settings, res *Result) error
	// close releases the engine's programs and memory (a ZeRO-3 engine's regions and
	// offload files, the device's state); the engine is unusable afterwards. It is local:
	// a rank that failed closes its engine as one that finished does.
	close() error
}

// closePrograms closes the training program and the evaluation programs an engine compiled,
// and returns the first error.
func closePrograms(train interface{ Close() error }, evals map[int]evalProgram) error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if train != nil {
		keep(train.Close())
	}
	for n, p := range evals {
		keep(p.Close())
		delete(evals, n)
	}
	return first
}

// precision sets up autocast (-amp): bf16 as PyTorch's CPU autocast, without loss scaling;
// fp16 with a GradScaler whose inf/NaN flag is agreed over the group, so that every rank
// skips the same steps.
func precision(cfg *settings, g comm.Group) ([]nn.BuildOption, *amp.GradScaler, error) {
	switch cfg.AMP {
	case "":
		return nil, nil, nil
	case "bf16":
		return []nn.BuildOption{nn.WithAutocast(amp.Autocast(amp.BF16))}, nil, nil
	case "fp16":
		var sopts []amp.Option
		if cfg.AMPInitScale > 0 {
			sopts = append(sopts, amp.WithInitScale(cfg.AMPInitScale))
		}
		s, err := amp.NewShardedScaler(g, sopts...)
		if err != nil {
			return nil, nil, err
		}
		return []nn.BuildOption{nn.WithAutocast(amp.Autocast(amp.FP16))}, s, nil
	}
	return nil, nil, fmt.Errorf("trainer: unknown -amp %q (bf16 or fp16)", cfg.AMP)
}
