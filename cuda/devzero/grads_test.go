package devzero_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// The gradient shard's unscale, sum of squares, scaling and clip (grads.go), on the device
// and on the pinned host copy under zero.OffloadCPU, at world 1 after one Run of the
// perceptron, through the engine (zero.Engine's operations on this backend), observed
// through GradSumSquares and ShardGrad: unscaling by 4 divides each element by 4 and Σg² by
// 16 and finds no inf, a scale whose reciprocal overflows float32 finds one,
// ScaleGrads(0.5) divides Σg² by 4, and ClipGradNorm returns optim's norm √Σg² and leaves the
// shard at optim's coefficient.
// AdamW hides a gradient's scale, so the trainer's runs cannot check the unscale itself.
func TestGradShardUnscaleAndClip(t *testing.T) {
	cudatest.Require(t)
	for _, offload := range []bool{false, true} {
		t.Run(fmt.Sprintf("offload=%v", offload), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dev, g := oneRank(t)
			const n = 8
			build := gormlp.Fixed(1, n)
			m, err := nn.NewGraphModel(build)
			if err != nil {
				t.Fatal(err)
			}
			opts := adamOpts()
			if offload {
				opts = append(opts, zero.WithOffload(zero.OffloadCPU, 0))
			}
			e, _, err := newEngine(ctx, dev, m, g, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			p, err := e.Compile(build)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			x, y := make([]float32, n*gormlp.In), make([]float32, n*gormlp.Out)
			gormlp.Data(x, y, 0, n)
			if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
				t.Fatal(err)
			}
			if err := p.Run(ctx); err != nil {
				t.Fatal(err)
			}
			g0, err := e.ShardGrad(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var want float64
			for _, v := range g0 {
				want += float64(v) * float64(v)
			}
			if want == 0 {
				t.Fatal("the gradient shard is zero after a Run")
			}
			// Exact scalings (by powers of two) leave Σg² exact up to the float64 sum's order;
			// the clip's float32 coefficient rounds each product (≤ 2^-24 relative, so Σg²
			// within 2^-22).
			sumsqTol := func(what string, want, tol float64) float64 {
				t.Helper()
				got, err := e.GradSumSquares(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(got-want) > tol*want {
					t.Fatalf("%s: Σg² %.17g, want %.17g", what, got, want)
				}
				return got
			}
			sumsq := func(what string, want float64) float64 { t.Helper(); return sumsqTol(what, want, 1e-12) }
			sq := sumsq("after the Run", want)
			inf, err := e.UnscaleGrads(ctx, 4)
			if err != nil || inf {
				t.Fatalf("unscale by 4: inf %v, err %v; want no inf", inf, err)
			}
			sq = sumsq("unscaled by 4", sq/16)
			g1, err := e.ShardGrad(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range g0 {
				if g1[i] != g0[i]/4 {
					t.Fatalf("element %d unscaled by 4: %g, want %g", i, g1[i], g0[i]/4)
				}
			}
			if err := e.ScaleGrads(ctx, 0.5); err != nil {
				t.Fatal(err)
			}
			sq = sumsq("scaled by 0.5", sq/4)
			maxNorm := math.Sqrt(sq) / 3
			// The norm and the factor are optim's (optim.ClipCoef) for the all-reduced Σg²
			// (at world 1, this rank's).
			norm, c, err := optim.ClipCoef(maxNorm, sq)
			if err != nil || c >= 1 {
				t.Fatalf("optim.ClipCoef(%g, %g) = %g, %v: want a factor below 1", maxNorm, sq, c, err)
			}
			got, err := e.ClipGradNorm(ctx, maxNorm)
			if err != nil || got != norm {
				t.Fatalf("clip: norm %.17g, err %v; want optim's %.17g", got, err, norm)
			}
			coef := float64(c)
			sq = sumsqTol("clipped", sq*coef*coef, 0x1p-22)
			// A norm already within maxNorm leaves the shard as it is.
			if _, err := e.ClipGradNorm(ctx, 10*norm); err != nil {
				t.Fatal(err)
			}
			sumsq("not clipped", sq)
			if inf, err := e.UnscaleGrads(ctx, math.SmallestNonzeroFloat32); err != nil || !inf {
				t.Fatalf("unscale by %g (its reciprocal overflows float32): inf %v, err %v; want inf", math.SmallestNonzeroFloat32, inf, err)
			}
			// A non-finite norm is optim's error, and the shard is left as it was.
			before, err := e.ShardGrad(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, _, wantErr := optim.ClipCoef(1, math.Inf(1))
			if _, err := e.ClipGradNorm(ctx, 1); err == nil || !strings.Contains(err.Error(), wantErr.Error()) {
				t.Fatalf("clip of an inf gradient: %v, want optim's error %q", err, wantErr)
			}
			after, err := e.ShardGrad(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range before {
				if math.Float32bits(before[i]) != math.Float32bits(after[i]) {
					t.Fatalf("element %d changed by a refused clip: %g, was %g", i, after[i], before[i])
				}
			}
		})
	}
}
