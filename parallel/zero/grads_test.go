package zero

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// The gradient shard's operations on the host engine at world 2, after one training Run:
// ShardGrad and ShardParams are copies (writing one changes nothing), GradSumSquares is the
// shard's Σg², UnscaleGrads(4) and ScaleGrads(0.5) scale every element exactly,
// ClipGradNorm returns optim's norm for the two ranks' sums added (optim.ClipCoef) and
// leaves each shard at optim's factor, a non-finite shard is found by UnscaleGrads and
// refused by ClipGradNorm on every rank with the shard left as it was, and after Close the
// operations return ErrClosed. cuda/devzero's grads_test checks the same on the device.
func TestGradShardOperations(t *testing.T) {
	const world, per = 2, 2
	const maxNorm = 1e-3 // far below the first step's gradient norm: the clip scales
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"memory", nil},
		{"offload-cpu", []Option{WithOffload(OffloadCPU, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			groups := comm.NewLocalGroups(world)
			defer closeAll(groups)
			sqs, norms := make([]float64, world), make([]float64, world)
			before, after := make([][]float32, world), make([][]float32, world)
			err := each(world, func(r int) error {
				ctx := context.Background()
				m, err := nn.NewModel(convNet(false), nn.WithSeed(1))
				if err != nil {
					return err
				}
				e, err := New(ctx, m, groups[r], append([]Option{WithOptimizer(AdamW(lr))}, tc.opts...)...)
				if err != nil {
					return err
				}
				p, err := e.Compile(classify(per))
				if err != nil {
					return errors.Join(err, e.Close())
				}
				if err := feed(p, 0, r*per, (r+1)*per); err != nil {
					return err
				}
				if err := p.Run(ctx); err != nil {
					return err
				}
				g0, err := e.ShardGrad(ctx)
				if err != nil {
					return err
				}
				p0, err := e.ShardParams(ctx)
				if err != nil {
					return err
				}
				var want float64
				for _, v := range g0 {
					want += float64(v) * float64(v)
				}
				if want == 0 {
					return fmt.Errorf("the gradient shard is zero after a Run")
				}
				clear(g0[:len(g0)/2])
				p0[0]++
				if g, _ := e.ShardGrad(ctx); slices.Equal(g, g0) {
					return fmt.Errorf("writing ShardGrad's result changed the shard")
				}
				if q, _ := e.ShardParams(ctx); q[0] == p0[0] {
					return fmt.Errorf("writing ShardParams' result changed the shard")
				}
				if g0, err = e.ShardGrad(ctx); err != nil {
					return err
				}
				if sq, err := e.GradSumSquares(ctx); err != nil || sq != want {
					return fmt.Errorf("GradSumSquares %.17g, %v; want %.17g", sq, err, want)
				}
				if inf, err := e.UnscaleGrads(ctx, 4); err != nil || inf {
					return fmt.Errorf("unscale by 4: inf %v, err %v; want no inf", inf, err)
				}
				if err := e.ScaleGrads(ctx, 0.5); err != nil {
					return err
				}
				g1, err := e.ShardGrad(ctx)
				if err != nil {
					return err
				}
				for i := range g0 {
					if g1[i] != g0[i]/8 {
						return fmt.Errorf("element %d unscaled by 4 and scaled by 0.5: %g, want %g", i, g1[i], g0[i]/8)
					}
				}
				if sqs[r], err = e.GradSumSquares(ctx); err != nil {
					return err
				}
				before[r] = g1
				if norms[r], err = e.ClipGradNorm(ctx, maxNorm); err != nil {
					return err
				}
				if after[r], err = e.ShardGrad(ctx); err != nil {
					return err
				}
				if _, err := e.UnscaleGrads(ctx, 0); err == nil {
					return fmt.Errorf("unscale by a loss scale of 0: no error")
				}
				if inf, err := e.UnscaleGrads(ctx, math.SmallestNonzeroFloat32); err != nil || !inf {
					return fmt.Errorf("unscale by %g (its reciprocal overflows float32): inf %v, err %v; want inf", math.SmallestNonzeroFloat32, inf, err)
				}
				nonFinite, err := e.ShardGrad(ctx)
				if err != nil {
					return err
				}
				// The shards hold +Inf and, where 0 met the infinite reciprocal (padding), NaN:
				// the global norm is one of the two, and the error optim's for it.
				_, _, infErr := optim.ClipCoef(1, math.Inf(1))
				_, _, nanErr := optim.ClipCoef(1, math.NaN())
				if _, err := e.ClipGradNorm(ctx, 1); err == nil || !strings.Contains(err.Error(), infErr.Error()) && !strings.Contains(err.Error(), nanErr.Error()) {
					return fmt.Errorf("clip of a non-finite shard: %v, want optim's error %q or %q", err, infErr, nanErr)
				}
				if g, err := e.ShardGrad(ctx); err != nil || !sameBits(g, nonFinite) {
					return fmt.Errorf("a refused clip changed the shard (err %v)", err)
				}
				if err := errors.Join(p.Close(), e.Close()); err != nil {
					return err
				}
				if _, err := e.ShardGrad(ctx); !errors.Is(err, ErrClosed) {
					return fmt.Errorf("ShardGrad after Close: %v, want ErrClosed", err)
				}
				if _, err := e.UnscaleGrads(ctx, 1); !errors.Is(err, ErrClosed) {
					return fmt.Errorf("UnscaleGrads after Close: %v, want ErrClosed", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wantNorm, coef, err := optim.ClipCoef(maxNorm, sqs[0]+sqs[1])
			if err != nil || coef >= 1 {
				t.Fatalf("optim.ClipCoef(%g, %g) = %g, %v: want a factor below 1", maxNorm, sqs[0]+sqs[1], coef, err)
			}
			for r := range world {
				if norms[r] != wantNorm {
					t.Errorf("rank %d: ClipGradNorm %.17g, want optim's %.17g over both ranks' shards", r, norms[r], wantNorm)
				}
				for i := range before[r] {
					if after[r][i] != before[r][i]*coef {
						t.Fatalf("rank %d: element %d clipped to %g, want %g·%g", r, i, after[r][i], before[r][i], coef)
					}
				}
			}
		})
	}
}

// sameBits reports whether a and b hold the same float32 bit patterns (NaN included).
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
