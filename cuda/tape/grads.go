package tape

import (
	"context"
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/optim"
)

// What a training step does to the whole device gradient buffer between backward (and its
// reduction) and the optimizer, as the trainer does to the host's ParamSet.Grad: the loss
// scale's unscaling with its inf/NaN check (amp.GradScaler.Unscale), the gradient norm and
// clipping (torch.nn.utils.clip_grad_norm_), the 1/A of gradient accumulation. Each reads at
// most one scalar back to the host.

// UnscaleGrads multiplies the device gradients by 1/scale (the reciprocal computed in
// float64 and rounded to float32, as amp.GradScaler.Unscale) and reports whether any
// unscaled gradient is inf or NaN, in one kernel pass. It waits for the device.
func (s *State) UnscaleGrads(ctx context.Context, scale float32) (foundInf bool, err error) {
	if s.grad == nil {
		return false, fmt.Errorf("cuda/tape: unscale: a unit state has no gradient buffer")
	}
	if !(scale > 0) {
		return false, fmt.Errorf("cuda/tape: unscale: loss scale %g, want > 0", scale)
	}
	n, err := s.dev.UnscaleNonFinite(ctx, s.grad, float32(1/float64(scale)))
	if err != nil {
		return false, fmt.Errorf("cuda/tape: unscaling the gradients: %w", err)
	}
	return n > 0, nil
}

// GradNorm is the L2 norm of the device gradient buffer, summed in float64 on the device:
// inf or NaN when a gradient is. It waits for the device.
func (s *State) GradNorm(ctx context.Context) (float64, error) {
	sq, err := s.sumSquares(ctx)
	return math.Sqrt(sq), err
}

// sumSquares is Σ g² over the device gradient buffer, in float64 on the device.
func (s *State) sumSquares(ctx context.Context) (float64, error) {
	if s.grad == nil {
		return 0, fmt.Errorf("cuda/tape: gradient norm: a unit state has no gradient buffer")
	}
	sq, err := s.dev.SumSquares(ctx, s.grad)
	if err != nil {
		return 0, fmt.Errorf("cuda/tape: gradient norm: %w", err)
	}
	return sq, nil
}

// ScaleGrads multiplies every device gradient by f, on the device's stream.
func (s *State) ScaleGrads(f float32) error {
	if s.grad == nil {
		return fmt.Errorf("cuda/tape: scaling the gradients: a unit state has no gradient buffer")
	}
	if err := s.dev.Scale(s.grad, s.grad, f); err != nil {
		return fmt.Errorf("cuda/tape: scaling the gradients by %g: %w", f, err)
	}
	return nil
}

// ClipGradNorm scales the device gradients so that their global L2 norm is at most maxNorm:
// the norm is summed on the device, the factor is optim's (optim.ClipCoef,
// torch.nn.utils.clip_grad_norm_), and a norm that is inf or NaN is optim's error with the
// gradients left as they are. It returns the norm before clipping and waits for the device.
func (s *State) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	sq, err := s.sumSquares(ctx)
	if err != nil {
		return 0, err
	}
	norm, coef, err := optim.ClipCoef(maxNorm, sq)
	if err != nil {
		return norm, fmt.Errorf("cuda/tape: %w", err)
	}
	if coef < 1 {
		if err := s.ScaleGrads(coef); err != nil {
			return norm, err
		}
	}
	return norm, nil
}
