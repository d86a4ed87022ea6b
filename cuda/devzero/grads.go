package devzero

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/optim"
)

// shardHost waits for the gradient shard's copies to the pinned host shard and returns it
// (offload only): under zero.OffloadCPU the gradient operations work there, with the host
// engine's arithmetic, and the device shard is only zeroed after that.
func (e *Backend) shardHost(ctx context.Context) ([]float32, error) {
	if err := e.dev.Synchronize(ctx); err != nil {
		return nil, fmt.Errorf("devzero: rank %d: waiting for the gradient shard's copy to the host: %w", e.rank, err)
	}
	return e.opt.gradHost, nil
}

// UnscaleGrads is zero.Engine.UnscaleGrads on the shard, in one pass (scale > 0: the engine
// checked it).
func (e *Backend) UnscaleGrads(ctx context.Context, scale float32) (foundInf bool, err error) {
	if e.opt.offload {
		g, err := e.shardHost(ctx)
		if err != nil {
			return false, err
		}
		return amp.Unscale(g, scale), nil
	}
	n, err := e.dev.UnscaleNonFinite(ctx, e.shardG, float32(1/float64(scale)))
	if err != nil {
		return false, fmt.Errorf("devzero: rank %d: unscaling the gradient shard: %w", e.rank, err)
	}
	return n > 0, nil
}

// GradSumSquares is zero.Engine.GradSumSquares on the shard, accumulated in float64.
func (e *Backend) GradSumSquares(ctx context.Context) (float64, error) {
	if e.opt.offload {
		g, err := e.shardHost(ctx)
		if err != nil {
			return 0, err
		}
		return optim.GradNormSq([]optim.Segment{{Grad: g}}), nil
	}
	sq, err := e.dev.SumSquares(ctx, e.shardG)
	if err != nil {
		return 0, fmt.Errorf("devzero: rank %d: sum of squares of the gradient shard: %w", e.rank, err)
	}
	return sq, nil
}

// ScaleGrads is zero.Engine.ScaleGrads on the shard (on the device's stream, or on the host
// copy under zero.OffloadCPU).
func (e *Backend) ScaleGrads(ctx context.Context, f float32) error {
	if e.opt.offload {
		g, err := e.shardHost(ctx)
		if err != nil {
			return err
		}
		simd.Scale(g, f)
		return nil
	}
	if err := e.dev.Scale(e.shardG, e.shardG, f); err != nil {
		return fmt.Errorf("devzero: rank %d: scaling the gradient shard by %g: %w", e.rank, f, err)
	}
	return nil
}
