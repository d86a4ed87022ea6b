package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
)

// geluRef is GELU and its derivative in float64 from math.Erfc, which stays relatively
// accurate where 0.5·(1+erf(x/√2)) cancels (x ≪ 0).
func geluRef(x float64) (y, d float64) {
	cdf := 0.5 * math.Erfc(-x*invSqrt2)
	return x * cdf, cdf + x*invSqrt2Pi*math.Exp(-0.5*x*x)
}

// TestGELU32MatchesFloat64 runs the float32 kernels over a dense grid of x in [-16, 16]
// (step 2⁻¹², every value exact in float32) plus extremes, against float64 references: the
// Go code, and the kernels a training step runs (simd.go's wrappers) at every SIMD level the
// CPU has.
//
// Bounds: the forward is within 7e-8 relative (float32's rounding, 2⁻²⁴ ≈ 6e-8, plus the
// ≲ 1e-9 of the approximations) wherever y is a normal float32, and within one subnormal
// step below. The backward's two terms cancel near x ≈ -0.75 (where GELU' = 0), so its bound
// is relative to the terms' magnitudes: |dx - d| ≤ 6e-8·|d| + 2e-9·(Φ(x) + |x|·φ(x)).
func TestGELU32MatchesFloat64(t *testing.T) {
	t.Run("go", func(t *testing.T) { checkGELU32(t, gelu32Fwd, gelu32Bwd) })
	simdtest.Each(t, func(t *testing.T, _ simd.Level) { checkGELU32(t, simdGELUFwd, simdGELUBwd) })
}

func checkGELU32(t *testing.T, fwd func(x, y []float32), bwd func(x, dy, dx []float32)) {
	var xs []float32
	for i := -16 << 12; i <= 16<<12; i++ {
		xs = append(xs, float32(i)/(1<<12))
	}
	xs = append(xs, 1e-30, -1e-30, 1e-6, -1e-6, -18.5, -20, -40, 40, -1e20, 1e20, 1e30, -1e30)
	y := make([]float32, len(xs))
	dx := make([]float32, len(xs))
	ones := make([]float32, len(xs))
	for i := range ones {
		ones[i] = 1
	}
	fwd(xs, y)
	bwd(xs, ones, dx)
	var worstY, worstD float64
	for i, xf := range xs {
		x := float64(xf)
		wy, wd := geluRef(x)
		if math.Abs(wy) >= 0x1p-126 {
			if e := math.Abs(float64(y[i])-wy) / math.Abs(wy); e > worstY {
				worstY = e
			}
			if e := math.Abs(float64(y[i])-wy) / math.Abs(wy); e > 7e-8 {
				t.Errorf("gelu(%v) = %v, want %v (rel error %.3g)", xf, y[i], wy, e)
			}
		} else if math.Abs(float64(y[i])-wy) > 0x1p-149 {
			t.Errorf("gelu(%v) = %v, want %v (below float32's normal range)", xf, y[i], wy)
		}
		cdf := 0.5 * math.Erfc(-x*invSqrt2)
		scale := cdf + math.Abs(x)*invSqrt2Pi*math.Exp(-0.5*x*x)
		e := math.Abs(float64(dx[i]) - wd)
		if e > 6e-8*math.Abs(wd)+2e-9*scale+0x1p-149 {
			t.Errorf("gelu'(%v) = %v, want %v (error %.3g, term scale %.3g)", xf, dx[i], wd, e, scale)
		}
		if r := (e - 6e-8*math.Abs(wd)) / scale; scale > 0x1p-100 && r > worstD {
			worstD = r
		}
	}
	t.Logf("max rel error of y %.3g; backward error beyond rounding, relative to term scale %.3g", worstY, worstD)

	// dy scales dx, rounded once.
	dys := []float32{0.37, -2.5, 1e-20}
	x := []float32{-3.1, 0.4, 2.2}
	bwd(x, dys, dx)
	for i := range x {
		_, wd := geluRef(float64(x[i]))
		want := float64(dys[i]) * wd
		if e := math.Abs(float64(dx[i])-want) / math.Abs(want); e > 7e-8 {
			t.Errorf("dy %v · gelu'(%v) = %v, want %v (rel error %.3g)", dys[i], x[i], dx[i], want, e)
		}
	}
}

// TestGELU32Edges: NaN propagates; ±0 give ±0 and gradient 0.5; large |x| give x (and 0).
func TestGELU32Edges(t *testing.T) {
	x := []float32{float32(math.NaN()), 0, float32(math.Copysign(0, -1)), 1e30, -1e30}
	y, d := make([]float32, len(x)), make([]float32, len(x))
	gelu32Fwd(x, y)
	gelu32Bwd(x, []float32{1, 1, 1, 1, 1}, d)
	if !math.IsNaN(float64(y[0])) || !math.IsNaN(float64(d[0])) {
		t.Errorf("gelu(NaN) = %v, gelu'(NaN) = %v, want NaN", y[0], d[0])
	}
	if y[1] != 0 || math.Signbit(float64(y[1])) || y[2] != 0 || !math.Signbit(float64(y[2])) || d[1] != 0.5 || d[2] != 0.5 {
		t.Errorf("gelu(±0) = %v %v, gelu' = %v %v; want +0 -0, 0.5 0.5", y[1], y[2], d[1], d[2])
	}
	if y[3] != 1e30 || y[4] != 0 || d[3] != 1 || d[4] != 0 {
		t.Errorf("gelu(±1e30) = %v %v, gelu' = %v %v; want 1e30 -0, 1 0", y[3], y[4], d[3], d[4])
	}
}

func BenchmarkGELU32(b *testing.B) {
	// N(0, 1) activations, as after a normalisation and a Linear.
	rng := rand.New(rand.NewSource(1))
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y, dx := make([]float32, len(x)), make([]float32, len(x))
	b.Run("fwd", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			gelu32Fwd(x, y)
		}
	})
	b.Run("bwd", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			gelu32Bwd(x, y, dx)
		}
	})
	b.Run("fwd_erf", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			for i, v := range x {
				f := float64(v)
				y[i] = float32(0.5 * f * (1 + math.Erf(f*invSqrt2)))
			}
		}
	})
	b.Run("bwd_erf", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			for i, v := range x {
				f := float64(v)
				dx[i] = float32(float64(y[i]) * (0.5*(1+math.Erf(f*invSqrt2)) + f*invSqrt2Pi*math.Exp(-0.5*f*f)))
			}
		}
	})
}
