package trainer

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/train"
)

// stepper is the one training step of every strategy: it drives the strategy's
// train.Program (Run, then Step), with what the trainer adds between the two (the loss
// scale's unscaling and inf check, gradient clipping, gradient accumulation). With none of
// them, it calls train.RunStep, so a strategy that overlaps the update with the reduction
// (DDP's per-bucket update) does.
//
// Gradient accumulation (-grad-accum-steps A): an optimizer step is A Runs on A batches;
// the first A-1 run inside noSync (DDP's NoSync: no all-reduce, the gradients add up
// locally), the last one reduces the sum, and update scales it by 1/A before clipping and
// stepping, so that the step sees the gradient of the mean loss over the A batches, as timm
// dividing each loss by A does. Without noSync (ZeRO-3) every Run reduces: plain
// accumulation, the same sum at A times the communication.
type stepper struct {
	prog train.Program
	// grads are the gradients this rank holds, where update works on them: all of them in
	// host memory (hostGrads) or on the device (deviceGrads), or its ZeRO-3 shard on any
	// backend (*zero.Engine).
	grads  gradBuffer
	scaler *amp.GradScaler
	clip   float64
	labels []float32
	// accum is the number of batches per optimizer step (1 or less: one).
	accum int
	// noSync runs fn with the gradient reduction off (ddp.DDP.NoSync); nil where each Run
	// must reduce (ZeRO-3's reduce-scatter frees the full gradients).
	noSync func(fn func() error) error
	// mix mixes each batch (mixup, cutmix) and feeds soft targets; nil feeds the labels.
	mix *mixer
}

// gradBuffer is what update does to the gradients between Run and Step, wherever they are:
// unscale by the loss scale with the inf/NaN check, scale (gradient accumulation's 1/A) and
// clip to a global norm with optim's rule (optim.ClipCoef), summing the ranks' squares when
// each holds a disjoint part (zero.Engine.ClipGradNorm, collective). Every rank calls them
// alike.
type gradBuffer interface {
	UnscaleGrads(ctx context.Context, scale float32) (foundInf bool, err error)
	ScaleGrads(ctx context.Context, f float32) error
	ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error)
}

// hostGrads is a gradBuffer over gradients in host memory that every rank holds alike
// (the replicated strategies' averaged gradients): no communication for the norm. The
// arithmetic is the host ZeRO-3 shard's (amp.Unscale, simd.Scale) and optim's.
type hostGrads func() []float32

func (h hostGrads) UnscaleGrads(_ context.Context, scale float32) (bool, error) {
	return amp.Unscale(h(), scale), nil
}

func (h hostGrads) ScaleGrads(_ context.Context, f float32) error {
	simd.Scale(h(), f)
	return nil
}

func (h hostGrads) ClipGradNorm(_ context.Context, maxNorm float64) (float64, error) {
	return optim.ClipGradNorm([]optim.Segment{{Name: "gradients", Grad: h()}}, maxNorm)
}

// deviceGrads is a gradBuffer over a device's gradient buffer (-device cuda, replicated:
// the State's buffer after the program's reduction): kernels, each check reading one
// scalar back.
type deviceGrads struct{ *tape.State }

func (d deviceGrads) ScaleGrads(_ context.Context, f float32) error { return d.State.ScaleGrads(f) }

// micro says where a batch falls in the run: pos counts batches from the start of training
// (optimizer step × accumulation + index within the step), last marks the last batch of an
// optimizer step.
type micro struct {
	pos  int64
	last bool
}

// fused reports whether the step is one RunStep (nothing happens between Run and Step).
func (s *stepper) fused() bool { return s.scaler == nil && s.clip <= 0 && s.accum <= 1 }

// run feeds b and runs the program (and, when fused, steps it); it returns this rank's loss,
// unscaled. A batch that is not the last of its optimizer step runs without reducing.
func (s *stepper) run(ctx context.Context, b *data.Batch, at micro) (float32, error) {
	if err := s.feed(b, at.pos); err != nil {
		return 0, err
	}
	var err error
	switch {
	case s.fused():
		err = train.RunStep(ctx, s.prog)
	case !at.last && s.noSync != nil:
		err = s.noSync(func() error { return s.prog.Run(ctx) })
	default:
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

// feed copies a batch into the program's inputs "images" and "labels", or, mixing, mixes
// it first and feeds "images" and "targets".
func (s *stepper) feed(b *data.Batch, pos int64) error {
	n := b.N * b.C * b.H * b.W
	if len(b.Images) < n {
		return fmt.Errorf("trainer: batch of %d images holds %d values, want %d", b.N, len(b.Images), n)
	}
	if s.mix != nil {
		targets, _ := s.mix.mix(b, pos)
		if err := s.prog.SetInput("images", b.Images[:n]); err != nil {
			return err
		}
		return s.prog.SetInput("targets", targets)
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

// update completes a step that run did not, on the gradients wherever they are (grads), in
// one order: unscale with the inf/NaN check, 1/A for gradient accumulation, clip to
// -clip-grad's global norm, then Step, or ZeroGrad when the scale overflowed on any rank
// (every rank skips alike), and the scale's update (stepOrSkip). The scale stays the host
// scaler's (amp.GradScaler.Update, with its group's all-reduce of the flag).
func (s *stepper) update(ctx context.Context) error {
	if s.fused() {
		return nil
	}
	if s.scaler != nil {
		inf, err := s.grads.UnscaleGrads(ctx, s.scaler.Scale())
		if err != nil {
			return fmt.Errorf("trainer: loss scale: %w", err)
		}
		s.scaler.Unscaled(inf)
	}
	if s.accum > 1 {
		if err := s.grads.ScaleGrads(ctx, 1/float32(s.accum)); err != nil {
			return fmt.Errorf("trainer: gradient accumulation: %w", err)
		}
	}
	if err := s.clipGrads(ctx); err != nil {
		return err
	}
	return stepOrSkip(ctx, s.prog, s.scaler)
}

// clipGrads clips the gradients to -clip-grad's global norm, unless there is nothing to
// clip: no -clip-grad, or under -amp fp16 a step whose gradients overflowed on some rank,
// which every rank skips (stepOrSkip; optim's clipping refuses the non-finite norm of such
// gradients).
func (s *stepper) clipGrads(ctx context.Context) error {
	if s.clip <= 0 {
		return nil
	}
	if s.scaler != nil {
		if skip, err := s.scaler.FoundInf(ctx); err != nil || skip {
			return err
		}
	}
	if _, err := s.grads.ClipGradNorm(ctx, s.clip); err != nil {
		return fmt.Errorf("trainer: -clip-grad %g: %w (the loss diverged; a lower -lr or -amp fp16's loss scaling skips such steps)", s.clip, err)
	}
	return nil
}

// lossScale is the loss scale of -amp fp16 for the next step, after this step's update (a
// halving marks a skipped step); 0 without a scaler.
func (s *stepper) lossScale() float64 {
	if s.scaler == nil {
		return 0
	}
	return float64(s.scaler.Scale())
}

// lossScaleOf is eng's loss scale for the metrics log (0 for an engine without one).
func lossScaleOf(eng engine) float64 {
	if ls, ok := eng.(interface{ lossScale() float64 }); ok {
		return ls.lossScale()
	}
	return 0
}

// stepOrSkip ends an update whose gradients are final (unscaled, averaged over accumulated
// micro-steps, clipped): prog's Step, or, when scaler (-amp fp16) saw an inf/NaN on any rank,
// ZeroGrad instead (every rank skips alike), then the scale's update. Without a scaler it is
// Step. The host, device and device-ZeRO-3 updates all end here.
func stepOrSkip(ctx context.Context, prog train.Program, scaler *amp.GradScaler) error {
	if scaler == nil {
		return prog.Step(ctx)
	}
	inf, err := scaler.FoundInf(ctx)
	if err != nil {
		return err
	}
	if inf {
		if err := prog.ZeroGrad(); err != nil {
			return err
		}
	} else if err := prog.Step(ctx); err != nil {
		return err
	}
	return scaler.UpdateContext(ctx)
}
