package trainer

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/train"
)

// stepper is the one training step of every strategy: it drives the strategy's
// train.Program (Run, then Step), with what the trainer adds between the two (the loss
// scale's unscaling and inf check, gradient clipping). With neither, it calls train.RunStep,
// so a strategy that overlaps the update with the reduction (DDP's per-bucket update) does.
type stepper struct {
	prog train.Program
	// grads returns the gradients this rank holds: all of them, or its ZeRO-3 shard.
	grads func() []float32
	// normGroup is the group over which the gradient norm is summed when each rank holds a
	// disjoint part of the gradients (ZeRO-3); nil when every rank holds all of them.
	normGroup comm.Group
	scaler    *amp.GradScaler
	clip      float64
	labels    []float32
}

// fused reports whether the step is one RunStep (nothing happens between Run and Step).
func (s *stepper) fused() bool { return s.scaler == nil && s.clip <= 0 }

// run feeds b and runs the program (and, when fused, steps it); it returns this rank's loss,
// unscaled.
func (s *stepper) run(ctx context.Context, b *data.Batch) (float32, error) {
	if err := s.feed(b); err != nil {
		return 0, err
	}
	var err error
	if s.fused() {
		err = train.RunStep(ctx, s.prog)
	} else {
		err = s.prog.Run(ctx)
	}
	if err != nil {
		return 0, err
	}
	lv, err := s.prog.LossValue()
	if s.scaler != nil {
		lv /= s.scaler.Scale() // the graph computed the scaled loss
	}
	return lv, err
}

// feed copies a batch into the program's inputs "images" and "labels".
func (s *stepper) feed(b *data.Batch) error {
	n := b.N * b.C * b.H * b.W
	if len(b.Images) < n {
		return fmt.Errorf("trainer: batch of %d images holds %d values, want %d", b.N, len(b.Images), n)
	}
	if err := s.prog.SetInput("images", b.Images[:n]); err != nil {
		return err
	}
	if cap(s.labels) < b.N {
		s.labels = make([]float32, b.N)
	}
	y := s.labels[:b.N]
	for i := range y {
		y[i] = float32(b.Labels[i])
	}
	return s.prog.SetInput("labels", y)
}

// update completes a step that run did not: unscale, clip, and Step (or, when the loss
// scale overflowed on any rank, ZeroGrad: every rank skips alike), then the scale's update.
func (s *stepper) update(ctx context.Context) error {
	if s.fused() {
		return nil
	}
	grads := s.grads()
	if s.scaler != nil {
		s.scaler.Unscale(grads)
	}
	if s.clip > 0 {
		if err := clipShards(ctx, s.normGroup, grads, s.clip); err != nil {
			return err
		}
	}
	if s.scaler == nil {
		return s.prog.Step(ctx)
	}
	inf, err := s.scaler.FoundInf(ctx)
	if err != nil {
		return err
	}
	if inf {
		s.prog.ZeroGrad()
	} else if err := s.prog.Step(ctx); err != nil {
		return err
	}
	return s.scaler.UpdateContext(ctx)
}
