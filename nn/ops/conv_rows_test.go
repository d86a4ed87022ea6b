package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestConvRowsMatchesNaive runs float32 convolution forwards through convForward's GEMM
// choice at every SIMD level the CPU has, with the implicit convolution off: shapes whose
// products simd.GemmRows32 takes at AVX-512 (64 output pixels of one image, or of a batch
// of 2x2 outputs; output channels not a multiple of its 6 rows; k not a multiple of its
// 128), one with a bias (the BLAS, which adds into it), and compares each output with a
// float64 convolution. Bound: a float32 sum of K products in any order is within
// K·2⁻²³·Σ|w·x| of the exact sum, plus one rounding of the bias's addition.
func TestConvRowsMatchesNaive(t *testing.T) {
	prev := implicitOff.Load()
	defer implicitOff.Store(prev)
	implicitOff.Store(true)
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		rng := rand.New(rand.NewSource(9))
		for _, c := range []struct {
			x, w []int
			o    ConvOpts
			bias bool
			fits bool // whether its shape fits the kernel at AVX-512 (a bias still sends it to the BLAS)
			m, k int  // its product: m output channels, k rows of the columns
		}{
			{x: []int{2, 60, 8, 8}, w: []int{13, 60, 3, 3}, o: ConvOpts{Padding: [2]int{1, 1}}, fits: true, m: 13, k: 540},
			{x: []int{2, 64, 16, 16}, w: []int{8, 64, 3, 3}, o: ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, fits: true, m: 8, k: 576},
			{x: []int{16, 60, 2, 2}, w: []int{7, 60, 3, 3}, o: ConvOpts{Padding: [2]int{1, 1}}, fits: true, m: 7, k: 540},
			{x: []int{2, 60, 8, 8}, w: []int{6, 60, 3, 3}, o: ConvOpts{Padding: [2]int{1, 1}}, bias: true, fits: true, m: 6, k: 540},
			{x: []int{2, 40, 8, 8}, w: []int{6, 40, 3, 3}, o: ConvOpts{Padding: [2]int{1, 1}}, m: 6, k: 360},
		} {
			name := fmt.Sprintf("x%v_w%v_bias%v", c.x, c.w, c.bias)
			if got := simd.GemmRowsConvFits(c.m, 64, c.k); got != (c.fits && lv == simd.AVX512) {
				t.Errorf("%s: GemmRowsConvFits(%d, 64, %d) = %v at %s", name, c.m, c.k, got, lv)
			}
			g := G.NewGraph()
			x := cvIn(g, tensor.Float32, rng, "x", c.x...)
			w := cvIn(g, tensor.Float32, rng, "w", c.w...)
			var b *G.Node
			if c.bias {
				b = cvIn(g, tensor.Float32, rng, "b", c.w[0])
			}
			y, err := Conv2d(x, w, b, c.o)
			if err != nil {
				t.Fatal(err)
			}
			m := G.NewTapeMachine(g)
			if err := m.RunAll(); err != nil {
				m.Close()
				t.Fatal(err)
			}
			f64 := func(n *G.Node) []float64 {
				if n == nil {
					return nil
				}
				v := n.Value().Data().([]float32)
				out := make([]float64, len(v))
				for i, e := range v {
					out[i] = float64(e)
				}
				return out
			}
			xv, wv, bv := f64(x), f64(w), f64(b)
			want := naiveConv(xv, wv, bv, c.x, c.w, c.o, y.Shape())
			abs := func(v []float64) []float64 {
				if v == nil {
					return nil
				}
				out := make([]float64, len(v))
				for i, e := range v {
					out[i] = math.Abs(e)
				}
				return out
			}
			mag := naiveConv(abs(xv), abs(wv), abs(bv), c.x, c.w, c.o, y.Shape())
			got := y.Value().Data().([]float32)
			K := float64(c.w[1] * c.w[2] * c.w[3])
			for i, v := range got {
				if e := math.Abs(float64(v) - want[i]); !(e <= (K+1)*0x1p-23*mag[i]) {
					t.Errorf("%s at %s: y[%d] = %g, want %g (bound %.3g)", name, lv, i, v, want[i], (K+1)*0x1p-23*mag[i])
					break
				}
			}
			m.Close()
		}
	})
}
