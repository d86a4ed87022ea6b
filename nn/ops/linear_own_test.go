package ops

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
)

// TestOwnGEMMTakesEveryLinear runs a linear layer's three products (forward with bias, data
// gradient, weight gradient) at every SIMD level the CPU has, once as on a machine whose BLAS
// runs AVX-512 kernels and once as on one whose BLAS runs narrower ones (blasNarrow), on
// shapes beyond the bounds of simd's Fits functions (swin_t's third-stage patch merging and
// qkv at fewer rows, inner dimensions beyond both of GemmRows32's bounds), on one within
// them, and on one whose weight gradient GemmDW32 refuses (100 columns, not a multiple of
// 16). Each result must be
// within check's bound of a float64 product; under ownGEMM (level AVX512 and a narrow BLAS)
// each must also be the bits of simd.GemmRows32 or simd.GemmDW32 called directly, so the
// kernels did take them, and at 2 threads the same bits as at 1.
func TestOwnGEMMTakesEveryLinear(t *testing.T) {
	prev := blasNarrow.Load()
	t.Cleanup(func() { blasNarrow.Store(prev) })
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		for _, narrow := range []bool{false, true} {
			if !narrow && lv != simd.AVX512 {
				continue // below AVX512 the BLAS's width changes nothing: one pass
			}
			blasNarrow.Store(narrow)
			own := narrow && lv == simd.AVX512
			if got := ownGEMM(); got != own {
				t.Fatalf("%v, narrow BLAS %v: ownGEMM() = %v", lv, narrow, got)
			}
			rng := rand.New(rand.NewSource(7))
			for _, s := range []struct {
				rows, in, out int
				kernel        bool // the kernels can compute all three products
			}{
				{100, 768, 384, true}, // third-stage patch merging, fewer rows
				{70, 384, 1152, true}, // third-stage qkv, fewer rows
				{32, 1536, 800, true}, // inner dimensions beyond 768 forward and 384 backward
				{1600, 96, 96, true},  // rows enough for the Fits bounds
				{260, 100, 24, false}, // the weight gradient's 100 columns: the BLAS
			} {
				x, w, b, dy := linearOperands(rng, s.rows, s.in, s.out)
				fwd := &linearOp{kernBase: newKernBase("ops.Linear", 3), rows: s.rows, in: s.in, out: s.out}
				gx := &linearGradOp{kernBase: newKernBase("ops.Linear.grad_x", 2), fwd: fwd}
				gw := &linearGradOp{kernBase: newKernBase("ops.Linear.grad_w", 2), fwd: fwd, wrtW: true}
				run := func(th int) (y, dx, dw []float32) {
					if th > 1 {
						setTestThreads(t, th)
						defer testThreads.Store(0)
					}
					y, dx, dw = make([]float32, s.rows*s.out), make([]float32, s.rows*s.in), make([]float32, s.out*s.in)
					if err := linearForward(fwd, denseVals(x, w, b), y); err != nil {
						t.Fatal(err)
					}
					if err := linearGrad(gx, denseVals(w, dy), dx); err != nil {
						t.Fatal(err)
					}
					if err := linearGrad(gw, denseVals(x, dy), dw); err != nil {
						t.Fatal(err)
					}
					return y, dx, dw
				}
				y, dx, dw := run(1)
				check(t, lv, "forward", s.rows, s.out, s.in, y, func(i, j, p int) (float64, float64) {
					return float64(x[i*s.in+p]), float64(w[j*s.in+p])
				}, b)
				check(t, lv, "data gradient", s.rows, s.in, s.out, dx, func(i, j, p int) (float64, float64) {
					return float64(dy[i*s.out+p]), float64(w[p*s.in+j])
				}, nil)
				checkDW(t, lv, s.rows, s.in, s.out, dy, x, dw)

				// The kernels' own products, called directly.
				ry, rdx, rdw := make([]float32, len(y)), make([]float32, len(dx)), make([]float32, len(dw))
				took := simd.GemmRows32(true, s.rows, s.out, s.in, x, s.in, w, s.in, b, ry, s.out) &&
					simd.GemmRows32(false, s.rows, s.in, s.out, dy, s.out, w, s.in, nil, rdx, s.in) &&
					simd.GemmDW32(s.out, s.in, s.rows, dy, s.out, x, s.in, rdw, s.in)
				if took != (s.kernel && lv == simd.AVX512) {
					t.Fatalf("%v %+v: the kernels computed it: %v", lv, s, took)
				}
				same := took && sameBits(ry, y) && sameBits(rdx, dx) && sameBits(rdw, dw)
				if own && s.kernel && !same {
					t.Errorf("%v %+v, narrow BLAS: the linear layer's products are not the kernels' bits", lv, s)
				}
				if own {
					y2, dx2, dw2 := run(2)
					if !sameBits(y, y2) || !sameBits(dx, dx2) || !sameBits(dw, dw2) {
						t.Errorf("%v %+v: 2 threads gave other bits than 1", lv, s)
					}
				}
			}
		}
	})
}

// sameBits reports whether a and b hold the same float32 bits.
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
