package zero

import (
	"context"
	"fmt"
	"slices"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// ShardGrad is a copy in host memory of this rank's gradient shard, valid after a training
// Run: Σ Shard floats, unit by unit (unit u's at u.ShardBase, the rank's elements
// [rank·Shard, (rank+1)·Shard) of the unit, padding included). Writing it does not change
// the shard (UnscaleGrads, ScaleGrads and ClipGradNorm do). With a backend it waits for the
// backend's copy (the device's).
func (e *Engine) ShardGrad(ctx context.Context) ([]float32, error) {
	if e.closed {
		return nil, ErrClosed
	}
	if e.be != nil {
		return e.be.ShardGrad(ctx)
	}
	return slices.Clone(e.grad), nil
}

// ShardParams is a copy in host memory of this rank's master shard, in ShardGrad's layout;
// writing it does not change the shard (Load does).
func (e *Engine) ShardParams(ctx context.Context) ([]float32, error) {
	if e.closed {
		return nil, ErrClosed
	}
	if e.be != nil {
		return e.be.ShardParams(ctx)
	}
	return slices.Clone(e.master), nil
}

// UnscaleGrads multiplies the gradient shard by 1/scale (the reciprocal in float64 rounded
// to float32, as amp.GradScaler.Unscale) and reports whether any unscaled element is inf or
// NaN. It is not collective: the caller agrees on the answer over the ranks (a sharded
// amp.GradScaler's FoundInf), since each rank sees only its shard.
func (e *Engine) UnscaleGrads(ctx context.Context, scale float32) (foundInf bool, err error) {
	if e.closed {
		return false, ErrClosed
	}
	if !(scale > 0) {
		return false, fmt.Errorf("zero: rank %d: unscale: loss scale %g, want > 0", e.rank, scale)
	}
	if e.be != nil {
		return e.be.UnscaleGrads(ctx, scale)
	}
	return amp.Unscale(e.grad, scale), nil
}

// ScaleGrads multiplies the gradient shard by f (gradient accumulation's 1/A). It is not
// collective.
func (e *Engine) ScaleGrads(ctx context.Context, f float32) error {
	if e.closed {
		return ErrClosed
	}
	if e.be != nil {
		return e.be.ScaleGrads(ctx, f)
	}
	simd.Scale(e.grad, f)
	return nil
}

// GradSumSquares is Σ g² over this rank's gradient shard (padding included: it is zero),
// accumulated in float64: inf or NaN when an element is. It is not collective.
func (e *Engine) GradSumSquares(ctx context.Context) (float64, error) {
	if e.closed {
		return 0, ErrClosed
	}
	if e.be != nil {
		return e.be.GradSumSquares(ctx)
	}
	return optim.GradNormSq([]optim.Segment{{Grad: e.grad}}), nil
}

// ClipGradNorm scales the gradient shards so that the global L2 norm of the gradients is at
// most maxNorm, as torch.nn.utils.clip_grad_norm_: the ranks' sums of squares
// (GradSumSquares) are all-reduced in float64 over the engine's group (the shards are
// disjoint), and the norm and factor are optim's (optim.ClipCoef), as is the error for a
// norm that is inf or NaN, which leaves the shards as they are. It is collective: every rank
// calls it alike. It returns the global norm before clipping.
func (e *Engine) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	sq, err := e.GradSumSquares(ctx)
	if err != nil {
		return 0, err
	}
	buf := []float64{sq}
	if err := e.g.AllReduce(comm.F64(buf), comm.Sum).Wait(ctx); err != nil {
		return 0, fmt.Errorf("zero: rank %d: gradient norm all-reduce: %w", e.rank, err)
	}
	norm, coef, err := optim.ClipCoef(maxNorm, buf[0])
	if err != nil {
		return norm, fmt.Errorf("zero: rank %d: %w", e.rank, err)
	}
	if coef < 1 {
		if err := e.ScaleGrads(ctx, coef); err != nil {
			return norm, err
		}
	}
	return norm, nil
}
