package trainer

import (
	"context"
	"fmt"
)

// Callback is what a user adds to training, as Lightning's Callback hooks: each field,
// when set, runs on every rank at its point of the loop, in the order the callbacks were
// added (WithCallback). A callback that returns an error ends the run with it, and the
// group is aborted with it (the other ranks' collectives fail at once, naming this rank). A
// callback that runs collectives must run them on every rank alike.
type Callback struct {
	// OnTrainStart runs once the model, the optimizer and any checkpoint are loaded, before
	// the first step of this run.
	OnTrainStart func(ctx context.Context, s Step) error
	// BeforeUpdate runs after the forward and backward of an optimizer step's last batch,
	// before the gradients are unscaled, clipped and applied (Lightning's
	// on_before_optimizer_step). s.Step is the step being taken.
	BeforeUpdate func(ctx context.Context, s Step) error
	// OnStepEnd runs after each optimizer step, once it is logged and (WithCheckpoints)
	// checkpointed.
	OnStepEnd func(ctx context.Context, s Step) error
	// OnEpochEnd runs after each complete epoch, its validation and its checkpoint.
	OnEpochEnd func(ctx context.Context, e Epoch) error
	// OnTrainEnd runs once the run's last checkpoint and summary are written.
	OnTrainEnd func(ctx context.Context, r *Result) error
}

// Step is where a run is, for callbacks.
type Step struct {
	Rank  int
	Epoch int   // 0-based
	Step  int64 // optimizer steps taken (BeforeUpdate: the step being taken)
	// Loss is this rank's loss of the step (0 before the first).
	Loss float64
	LR   float64
}

// Epoch is a complete epoch's figures, for callbacks.
type Epoch struct {
	Rank      int
	Epoch     int // 0-based
	Step      int64
	TrainLoss float64 // the epoch's mean training loss over ranks
	// Evaluated: a validation ran; ValLoss, Top1 and Top5 (percent) are its.
	Evaluated  bool
	ValLoss    float64
	Top1, Top5 float64
	Checkpoint string
}

// stepHook runs the hook that get picks of every callback with step s.
func stepHook(ctx context.Context, cbs []Callback, get func(Callback) func(context.Context, Step) error, s Step) error {
	for _, cb := range cbs {
		if f := get(cb); f != nil {
			if err := f(ctx, s); err != nil {
				return fmt.Errorf("trainer: callback at step %d: %w", s.Step, err)
			}
		}
	}
	return nil
}
