package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
)

// TestLinearWeightGradMatchesReference runs the linear layer's weight gradient (dw = dyᵀ·x)
// through linearGrad's GEMM choice at every SIMD level the CPU has, on shapes
// simd.GemmDWFits takes (swin_t's first-stage qkv and fc2 at 4100 rows; its third-stage
// projection at 1568 rows, at level AVX512 only; out channels not a multiple of the
// kernel's strips, rows not a multiple of its blocks) and on ones it leaves to the BLAS (in
// not a multiple of 16, too few rows, too wide a product for its rows), and compares
// with a float64 product on a sample of elements (checkDW) at 1, 2 and 3 threads. Where the
// kernel computes it, it must be the bits simd.GemmDW32 gives called directly, the same bits
// at every thread count (the kernel's sums do not depend on the split); the BLAS's may
// depend on it, so there each thread count is checked against the reference.
func TestLinearWeightGradMatchesReference(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		rng := rand.New(rand.NewSource(11))
		for _, s := range []struct {
			rows, in, out int
			kernel        bool // simd.GemmDWFits takes it at levels above Off
			avx512        bool // ... at level AVX512 only
		}{
			{4100, 96, 288, true, false},   // qkv: m 288, n 96
			{4100, 384, 96, true, false},   // fc2: m 96, n 384 (panels of 48 and, at AVX2, 16)
			{4227, 80, 20, true, false},    // m 20: a part strip; rows not a multiple of 128
			{4096, 24, 16, false, false},   // n 24: the BLAS
			{1000, 96, 96, false, false},   // too few rows: the BLAS
			{4096, 768, 384, false, false}, // c wider than the kernel's bound: the BLAS
			{1568, 384, 384, true, true},   // third-stage projection: c at the bound for 1536 rows
			{1568, 384, 768, false, false}, // third-stage patch merging: c wider, the BLAS
		} {
			kernel := s.kernel && lv != simd.Off && (!s.avx512 || lv == simd.AVX512)
			if got := simd.GemmDWFits(s.out, s.in, s.rows); got != kernel {
				t.Fatalf("%v %+v: GemmDWFits = %v", lv, s, got)
			}
			x := make([]float32, s.rows*s.in)
			dy := make([]float32, s.rows*s.out)
			for _, v := range [][]float32{x, dy} {
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
			}
			fwd := &linearOp{kernBase: newKernBase("ops.Linear", 2), rows: s.rows, in: s.in, out: s.out}
			grad := &linearGradOp{kernBase: newKernBase("ops.Linear.grad_w", 2), fwd: fwd, wrtW: true}
			// linearGrad sends it to the kernel where GemmDWFits takes it, or, through gemm,
			// where ownGEMM holds (a BLAS narrower than the CPU's AVX-512) and the kernel can
			// compute it.
			viaKernel := kernel || ownGEMM() && s.in >= ownGemmMinCols && simd.GemmDWTakes(s.out, s.in, s.rows)
			var first []float32
			for _, th := range []int{1, 2, 3} {
				dw := make([]float32, s.out*s.in)
				for i := range dw {
					dw[i] = 99 // overwritten, never read
				}
				func() {
					if th > 1 {
						setTestThreads(t, th)
						defer testThreads.Store(0)
					}
					if err := linearGrad(grad, denseVals(x, dy), dw); err != nil {
						t.Fatal(err)
					}
				}()
				if !viaKernel {
					// The BLAS's sums may depend on the split (OpenBLAS's Haswell kernels
					// sum a block of columns in another order than the whole): each thread
					// count is checked against the reference instead.
					checkDW(t, lv, s.rows, s.in, s.out, dy, x, dw)
					continue
				}
				if first == nil {
					first = dw
					checkDW(t, lv, s.rows, s.in, s.out, dy, x, dw)
					// The kernel's own product, bit for bit: linearGrad took it.
					ref := make([]float32, s.out*s.in)
					if !simd.GemmDW32(s.out, s.in, s.rows, dy, s.out, x, s.in, ref, s.in) {
						t.Fatalf("%v %+v: GemmDW32 refused a shape linearGrad sends it", lv, s)
					}
					for i := range ref {
						if math.Float32bits(ref[i]) != math.Float32bits(dw[i]) {
							t.Fatalf("%v %+v: dw[%d] = %v, the kernel gives %v: linearGrad did not take it", lv, s, i, dw[i], ref[i])
						}
					}
					continue
				}
				for i := range dw {
					if math.Float32bits(dw[i]) != math.Float32bits(first[i]) {
						t.Fatalf("%v %+v at %d threads: dw[%d] = %v, at 1 thread %v", lv, s, th, i, dw[i], first[i])
					}
				}
			}
		}
	})
}

// checkDW compares dw (out×in) with Σ_p dy[p][i]·x[p][j] in float64 on its first and last
// rows and every 7th element between. Bound as in check: rows·2⁻²³·Σ|dy·x|.
func checkDW(t *testing.T, lv simd.Level, rows, in, out int, dy, x, dw []float32) {
	t.Helper()
	for i := range out {
		for j := range in {
			if i > 0 && i < out-1 && (i*in+j)%7 != 0 {
				continue
			}
			var want, mag float64
			for p := range rows {
				ab := float64(dy[p*out+i]) * float64(x[p*in+j])
				want += ab
				mag += math.Abs(ab)
			}
			tol := float64(rows)*math.Ldexp(1, -23)*mag + 1e-30
			if got := float64(dw[i*in+j]); math.Abs(got-want) > tol {
				t.Fatalf("weight gradient %v, %dx%dx%d: [%d,%d] = %g, want %g ± %g", lv, out, in, rows, i, j, got, want, tol)
			}
		}
	}
}
