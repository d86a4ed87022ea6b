package ops

import (
	"cmp"
	"math/rand"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestOwnGEMMConv runs float32 convolutions of resnet's kinds through the GEMM path (forward,
// data gradient, filter gradient) at every SIMD level the CPU has, as on a machine whose BLAS
// runs AVX-512 kernels and as on one whose BLAS runs narrower ones (blasNarrow: gemm then
// sends the products simd's kernels can compute to them), and compares each with the same op
// in float64: within 1e-5 relative in the max norm, the bound between the GEMM path's own
// variants (TestConv2dBatchedMatchesPerImage). TestOwnGEMMDispatch checks which code gemm
// runs.
func TestOwnGEMMConv(t *testing.T) {
	gemmPathOnly(t)
	prev := blasNarrow.Load()
	t.Cleanup(func() { blasNarrow.Store(prev) })
	cases := []struct {
		name string
		x, w []int
		o    ConvOpts
	}{
		{"3x3 s2 p1", []int{4, 32, 16, 16}, []int{64, 32, 3, 3}, ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
		{"3x3 s1 p1", []int{3, 16, 16, 16}, []int{32, 16, 3, 3}, ConvOpts{Padding: [2]int{1, 1}}},
		{"1x1", []int{4, 64, 8, 8}, []int{32, 64, 1, 1}, ConvOpts{}},
		{"7x7 s2 p3", []int{2, 3, 32, 32}, []int{16, 3, 7, 7}, ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{3, 3}}},
	}
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		for _, c := range cases {
			rng := rand.New(rand.NewSource(9))
			g := G.NewGraph()
			x := gradcheck.Input(g, tensor.Float32, rng, "x", c.x...)
			w := gradcheck.Input(g, tensor.Float32, rng, "w", c.w...)
			y, err := Conv2d(x, w, nil, c.o)
			if err != nil {
				t.Fatal(err)
			}
			gm, n := y.Op().(*conv2dOp).g, c.x[0]
			dy := gradcheck.Rand(rng, tensor.Float32, y.Shape()...)
			run := func(ins [][]G.Value) [][]float32 {
				sc := new(convScratch)
				ops := []kernOp{
					&conv2dOp{kernBase: newKernBase("y", 2), g: gm, n: n, sc: sc},
					&convDataGradOp{kernBase: newKernBase("dx", 2), g: gm, n: n, sc: sc},
					&convFilterGradOp{kernBase: newKernBase("dw", 2), g: gm, n: n, sc: sc},
				}
				var out [][]float32
				for i, op := range ops {
					v, err := op.Do(ins[i]...)
					if err != nil {
						t.Fatalf("%s: %v: %v", c.name, op, err)
					}
					f := cvF64s(v)
					o := make([]float32, len(f))
					for j := range f {
						o[j] = float32(f[j])
					}
					out = append(out, o)
				}
				return out
			}
			f64 := func(v G.Value) G.Value {
				d := cvF64s(v)
				return tensor.New(tensor.WithBacking(d), tensor.WithShape(v.Shape().Clone()...))
			}
			ref := run([][]G.Value{{f64(x.Value()), f64(w.Value())}, {f64(w.Value()), f64(dy)}, {f64(x.Value()), f64(dy)}})
			ins := [][]G.Value{{x.Value(), w.Value()}, {w.Value(), dy}, {x.Value(), dy}}
			for _, narrow := range []bool{false, true} {
				blasNarrow.Store(narrow)
				got := run(ins)
				for j, name := range []string{"y", "dx", "dw"} {
					if e := maxRelDiff(f32to64(got[j]), f32to64(ref[j])); e > 1e-5 {
						t.Errorf("%v %s, narrow BLAS %v: %s differs from float64 by %.3g (max-norm relative, bound 1e-5)", lv, c.name, narrow, name, e)
					}
				}
			}
		}
	})
}

// f32to64 widens v.
func f32to64(v []float32) []float64 {
	o := make([]float64, len(v))
	for i, x := range v {
		o[i] = float64(x)
	}
	return o
}

// TestOwnGEMMDispatch calls gemm on float32 products of each form (a·b, a·bᵀ, aᵀ·b, aᵀ·bᵀ;
// scaled, accumulated and halved c; n not a multiple of 16, and below 16) at every SIMD
// level the CPU has, with a narrow BLAS and without, and checks which code computed each:
// under ownGEMM (level
// AVX512 and a narrow BLAS) a·op(b) must be the bits of simd.GemmRows32 (GemmRowsAdd32 when
// accumulated), aᵀ·b with n a multiple of 16 those of simd.GemmDW32, called directly; every
// other product (fewer than 16 columns among them), and every product without ownGEMM, the
// bits of the BLAS called directly. The inner dimension, 300, spans three of the
// weight-gradient kernel's blocks of 128, whose sums it adds rather than continuing one sum,
// so its bits differ from a BLAS's.
func TestOwnGEMMDispatch(t *testing.T) {
	prev := blasNarrow.Load()
	t.Cleanup(func() { blasNarrow.Store(prev) })
	const m, n, k = 40, 48, 300
	rng := rand.New(rand.NewSource(3))
	a, b := make([]float32, m*k), make([]float32, k*n)
	for _, v := range [][]float32{a, b} {
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
	}
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		for _, narrow := range []bool{false, true} {
			blasNarrow.Store(narrow)
			for _, f := range []struct {
				tA, tB      bool
				nn          int // columns of c
				alpha, beta float32
				kernel      string // under ownGEMM: "rows", "dw" or "" (the BLAS)
			}{
				{false, false, n, 1, 0, "rows"},
				{false, true, n, 1, 0, "rows"},
				{false, false, n, 1, 1, "rowsadd"},
				{false, true, 40, 1, 1, "rowsadd"},
				{false, false, 40, 1, 0, "rows"},
				{true, false, n, 1, 0, "dw"},
				{true, true, n, 1, 0, ""},
				{false, false, n, 2, 0, ""},
				{false, false, n, 1, 0.5, ""},
				{true, false, n, 1, 1, ""},
				{true, false, 40, 1, 0, ""},
				{false, false, 12, 1, 0, ""},
			} {
				lda, ldb := k, f.nn
				if f.tA {
					lda = m
				}
				if f.tB {
					ldb = k
				}
				c0 := make([]float32, m*f.nn)
				for i := range c0 {
					c0[i] = float32(i % 5)
				}
				got, want := slices.Clone(c0), slices.Clone(c0)
				gemm(f.tA, f.tB, m, f.nn, k, f.alpha, a, lda, b, ldb, f.beta, got, f.nn)
				kernel := f.kernel
				if !(narrow && lv == simd.AVX512) {
					kernel = ""
				}
				switch kernel {
				case "rows":
					if !simd.GemmRows32(f.tB, m, f.nn, k, a, lda, b, ldb, nil, want, f.nn) {
						t.Fatalf("%v %+v: GemmRows32 refused", lv, f)
					}
				case "rowsadd":
					if !simd.GemmRowsAdd32(f.tB, m, f.nn, k, a, lda, b, ldb, want, f.nn) {
						t.Fatalf("%v %+v: GemmRowsAdd32 refused", lv, f)
					}
				case "dw":
					if !simd.GemmDW32(m, f.nn, k, a, lda, b, ldb, want, f.nn) {
						t.Fatalf("%v %+v: GemmDW32 refused", lv, f)
					}
				default:
					ta, tb := blas.NoTrans, blas.NoTrans
					if f.tA {
						ta = blas.Trans
					}
					if f.tB {
						tb = blas.Trans
					}
					blas32.Implementation().Sgemm(ta, tb, m, f.nn, k, f.alpha, a, lda, b, ldb, f.beta, want, f.nn)
				}
				if !sameBits(got, want) {
					t.Errorf("%v, narrow BLAS %v, %+v: gemm did not run %q", lv, narrow, f, cmp.Or(kernel, "the BLAS"))
				}
			}
		}
	})
}
