package devzero

import (
	"context"
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/optim"
)

// What a training step does to the rank's gradient shard between Run and Step, as
// cuda/tape's State does to a whole device gradient buffer (tape.State.UnscaleGrads,
// GradNorm, ScaleGrads): the loss scale's unscaling with its inf/NaN check, the shard's sum
// of squares (the caller all-reduces it over the ranks for the global norm: the shards are
// disjoint) and a scaling (the clip's coefficient, gradient accumulation's 1/A). On the
// device they are kernels over the gradient shard; under zero.OffloadCPU they work on the
// pinned host copy the CPU optimizer steps from (the device shard is only zeroed after that).
// Every rank calls them alike; none is collective.

// shardHost waits for the gradient shard's copies to the pinned host shard and returns it
// (offload only).
func (e *Backend) shardHost(ctx context.Context) ([]float32, error) {
	if err := e.dev.Synchronize(ctx); err != nil {
		return nil, fmt.Errorf("devzero: rank %d: waiting for the gradient shard's copy to the host: %w", e.rank, err)
	}
	return e.opt.gradHost, nil
}

// UnscaleGrads multiplies the gradient shard by 1/scale (the reciprocal in float64 rounded
// to float32, as amp.GradScaler.Unscale) and reports whether any unscaled element is inf or
// NaN, in one pass. It waits for the device.
func (e *Backend) UnscaleGrads(ctx context.Context, scale float32) (foundInf bool, err error) {
	if !(scale > 0) {
		return false, fmt.Errorf("devzero: rank %d: unscale: loss scale %g, want > 0", e.rank, scale)
	}
	inv := float32(1 / float64(scale))
	if e.opt.offload {
		g, err := e.shardHost(ctx)
		if err != nil {
			return false, err
		}
		for i, x := range g {
			x *= inv
			g[i] = x
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				foundInf = true
			}
		}
		return foundInf, nil
	}
	n, err := e.dev.UnscaleNonFinite(ctx, e.shardG, inv)
	if err != nil {
		return false, fmt.Errorf("devzero: rank %d: unscaling the gradient shard: %w", e.rank, err)
	}
	return n > 0, nil
}

// GradSumSquares is Σ g² over the rank's gradient shard (padding included: it is zero),
// accumulated in float64: inf or NaN when an element is. It waits for the device.
func (e *Backend) GradSumSquares(ctx context.Context) (float64, error) {
	if e.opt.offload {
		g, err := e.shardHost(ctx)
		if err != nil {
			return 0, err
		}
		var sq float64
		for _, x := range g {
			sq += float64(x) * float64(x)
		}
		return sq, nil
	}
	sq, err := e.dev.SumSquares(ctx, e.shardG)
	if err != nil {
		return 0, fmt.Errorf("devzero: rank %d: sum of squares of the gradient shard: %w", e.rank, err)
	}
	return sq, nil
}

// ScaleGrads multiplies the gradient shard by f (on the device's stream, or on the host
// copy under zero.OffloadCPU).
func (e *Backend) ScaleGrads(ctx context.Context, f float32) error {
	if e.opt.offload {
		g, err := e.shardHost(ctx)
		if err != nil {
			return err
		}
		for i := range g {
			g[i] *= f
		}
		return nil
	}
	if err := e.dev.Scale(e.shardG, e.shardG, f); err != nil {
		return fmt.Errorf("devzero: rank %d: scaling the gradient shard by %g: %w", e.rank, f, err)
	}
	return nil
}

// ClipGradNorm scales the gradient shard so that the global L2 norm is at most maxNorm, as
// torch.nn.utils.clip_grad_norm_: sum turns this rank's sum of squares (summed on the
// device) into the sum over every rank's shard (an all-reduce; nil at world 1), and the
// factor is optim's (optim.ClipCoef), as is the error for a norm that is inf or NaN, which
// leaves the shard as it is. Every rank must call it alike. It returns the global norm
// before clipping.
func (e *Backend) ClipGradNorm(ctx context.Context, maxNorm float64, sum func(context.Context, float64) (float64, error)) (float64, error) {
	sq, err := e.GradSumSquares(ctx)
	if err != nil {
		return 0, err
	}
	if sum != nil {
		if sq, err = sum(ctx, sq); err != nil {
			return 0, fmt.Errorf("devzero: rank %d: gradient norm: %w", e.rank, err)
		}
	}
	norm, coef, err := optim.ClipCoef(maxNorm, sq)
	if err != nil {
		return norm, fmt.Errorf("devzero: rank %d: %w", e.rank, err)
	}
	if coef < 1 {
		if err := e.ScaleGrads(ctx, coef); err != nil {
			return norm, err
		}
	}
	return norm, nil
}
