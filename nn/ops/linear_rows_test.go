package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestLinearGemmMatchesReference runs the linear layer's products (forward with and without
// bias, data gradient) through linearForward's and linearGrad's GEMM choice at every SIMD
// level the CPU has, on swin_t's shapes where the AVX-512 row kernel takes over from the
// BLAS (first stage; second-stage qkv, whose data gradient runs over wᵀ; third-stage
// projection at 1568 rows) and on odd ones (rows not a multiple of the kernel's 8 or 64, k
// not a multiple of its 128, a last panel of 16 or 32 columns, shapes it leaves to the BLAS),
// and compares with a float64 product. Where the data gradient goes through wᵀ
// (gemmRowsWT) it must be the bits simd.GemmRows32 gives on wᵀ called directly. Bound: a
// float32 sum of k products in any order is within k·2⁻²³ of Σ|a·b|, plus one rounding of
// the bias's addition.
func TestLinearGemmMatchesReference(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		rng := rand.New(rand.NewSource(5))
		for _, s := range []struct {
			rows, in, out int
			bias          bool
		}{
			{4100, 384, 96, true},   // fc2 forward: n 96, k 384
			{4103, 96, 384, false},  // fc1 data gradient: n 96, k 384; fc2's: n 384, k 96
			{4096, 96, 288, true},   // qkv: forward n 288, k 96; gradient n 96, k 288
			{4105, 200, 80, true},   // k not a multiple of 128, last panel 32 columns
			{4096, 16, 64, false},   // one 16-column panel in the gradient
			{4099, 600, 48, true},   // forward k 600; gradient n 600, not a multiple of 16: the BLAS
			{4096, 48, 500, false},  // gradient k 500: over wᵀ
			{4100, 192, 576, true},  // second-stage qkv: gradient k 576, over wᵀ
			{4096, 192, 800, false}, // gradient k 800, beyond the transposed bound too: the BLAS
			{1000, 96, 96, true},    // too few rows: the BLAS
			{1568, 384, 384, true},  // third-stage projection: op(b) at the bound for 1536 rows
			{1568, 384, 768, true},  // larger op(b) at 1568 rows: the BLAS
		} {
			x, w, b, dy := linearOperands(rng, s.rows, s.in, s.out)
			fwd := &linearOp{kernBase: newKernBase("ops.Linear", 2), rows: s.rows, in: s.in, out: s.out}
			vals := denseVals(x, w)
			var bias []float32
			if s.bias {
				fwd.arity = 3
				bias = b
				vals = denseVals(x, w, b)
			}
			y := make([]float32, s.rows*s.out)
			for i := range y {
				y[i] = 99 // overwritten, never read
			}
			if err := linearForward(fwd, vals, y); err != nil {
				t.Fatal(err)
			}
			check(t, lv, "forward", s.rows, s.out, s.in, y, func(i, j, p int) (float64, float64) {
				return float64(x[i*s.in+p]), float64(w[j*s.in+p])
			}, bias)
			grad := &linearGradOp{kernBase: newKernBase("ops.Linear.grad_x", 2), fwd: fwd}
			dx := make([]float32, s.rows*s.in)
			if err := linearGrad(grad, denseVals(w, dy), dx); err != nil {
				t.Fatal(err)
			}
			check(t, lv, "data gradient", s.rows, s.in, s.out, dx, func(i, j, p int) (float64, float64) {
				return float64(dy[i*s.out+p]), float64(w[p*s.in+j])
			}, nil)
			if !simd.GemmRowsFits(false, s.rows, s.in, s.out) && simd.GemmRowsFits(true, s.rows, s.in, s.out) {
				// The transposed-weight product, bit for bit: linearGrad took it.
				wt := make([]float32, s.out*s.in)
				transposeInto(w, s.out, s.in, wt, s.out)
				ref := make([]float32, s.rows*s.in)
				if !simd.GemmRows32(true, s.rows, s.in, s.out, dy, s.out, wt, s.out, nil, ref, s.in) {
					t.Fatalf("%v %+v: GemmRows32 refused a shape GemmRowsFits takes", lv, s)
				}
				for i := range ref {
					if math.Float32bits(ref[i]) != math.Float32bits(dx[i]) {
						t.Fatalf("%v %+v: dx[%d] = %v, the kernel over wᵀ gives %v: linearGrad did not take it", lv, s, i, dx[i], ref[i])
					}
				}
			}
		}
	})
}

// check compares c (m×n) with Σ_p a(i,j,p)·b(i,j,p) (+ bias[j]) in float64, on the first
// and last 130 rows (two of the kernel's 64-row chunks and the tail) and every 17th between.
func check(t *testing.T, lv simd.Level, what string, m, n, k int, c []float32, ab func(i, j, p int) (float64, float64), bias []float32) {
	t.Helper()
	for i := range m {
		if i >= 130 && i < m-130 && i%17 != 0 {
			continue
		}
		for j := range n {
			var want, mag float64
			for p := range k {
				a, b := ab(i, j, p)
				want += a * b
				mag += math.Abs(a * b)
			}
			if bias != nil {
				want += float64(bias[j])
				mag += math.Abs(float64(bias[j]))
			}
			tol := (float64(k)+2)*math.Ldexp(1, -23)*mag + 1e-30
			if got := float64(c[i*n+j]); math.Abs(got-want) > tol {
				t.Fatalf("%s %v, %dx%dx%d: [%d,%d] = %g, want %g ± %g", what, lv, m, n, k, i, j, got, want, tol)
			}
		}
	}
}

// linearOperands is a linear layer's operands of standard normal float32s: x (rows×in), w
// (out×in), b (out) and dy (rows×out).
func linearOperands(rng *rand.Rand, rows, in, out int) (x, w, b, dy []float32) {
	x, w, b, dy = make([]float32, rows*in), make([]float32, out*in), make([]float32, out), make([]float32, rows*out)
	for _, v := range [][]float32{x, w, b, dy} {
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
	}
	return x, w, b, dy
}

// denseVals wraps float32 slices as the graph values the ops' kernels take.
func denseVals(xs ...[]float32) []G.Value {
	vals := make([]G.Value, len(xs))
	for i, x := range xs {
		vals[i] = tensor.New(tensor.WithBacking(x), tensor.WithShape(len(x)))
	}
	return vals
}
