package ops

import (
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestGatherForwardMatchesGEMM runs float32 forwards over small maps (Note [Small maps
// without the padding's products]) gathered and through the GEMM path, both under ownGEMM
// (blasNarrow set, so on any CPU with AVX-512): without a bias the gathered sums are
// im2col's sums with the zero products left out, so the outputs must be equal (== on
// float32, which also holds between +0 and -0); with a bias both within 1e-5 of float64. At
// 2 threads the gathered outputs must be the bits of 1. Below AVX512, and where the
// products inside the image are more than convGatherMaxShare, it must not be taken.
func TestGatherForwardMatchesGEMM(t *testing.T) {
	gemmPathOnly(t)
	prev := blasNarrow.Swap(true)
	t.Cleanup(func() { blasNarrow.Store(prev) })
	cases := []struct {
		name   string
		x, w   []int
		o      ConvOpts
		bias   bool
		gather bool
	}{
		{"2x2 3x3 p1 batch 16", []int{16, 24, 2, 2}, []int{40, 24, 3, 3}, ConvOpts{Padding: [2]int{1, 1}}, false, true},
		{"4x4 3x3 p1 batch 5", []int{5, 16, 4, 4}, []int{30, 16, 3, 3}, ConvOpts{Padding: [2]int{1, 1}}, false, true},
		{"3x2 3x3 p1 batch 33", []int{33, 7, 3, 2}, []int{13, 7, 3, 3}, ConvOpts{Padding: [2]int{1, 1}}, false, true},
		{"3x3 5x5 p2 batch 17", []int{17, 9, 3, 3}, []int{50, 9, 5, 5}, ConvOpts{Padding: [2]int{2, 2}}, false, true},
		{"1x1 p1 over 2x2 (pixels without products)", []int{3, 8, 2, 2}, []int{12, 8, 1, 1}, ConvOpts{Padding: [2]int{1, 1}}, false, true},
		{"2x2 3x3 p1 bias", []int{16, 24, 2, 2}, []int{40, 24, 3, 3}, ConvOpts{Padding: [2]int{1, 1}}, true, true},
		{"4x4 3x3 p0 (all inside)", []int{4, 8, 6, 6}, []int{8, 8, 3, 3}, ConvOpts{}, false, false},
		{"8x8 3x3 p1 (more than 16 pixels)", []int{4, 8, 8, 8}, []int{8, 8, 3, 3}, ConvOpts{Padding: [2]int{1, 1}}, false, false},
		{"2x2 3x3 p1 stride 2", []int{4, 8, 4, 4}, []int{8, 8, 3, 3}, ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, false, false},
	}
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		for _, c := range cases {
			rng := rand.New(rand.NewSource(4))
			g := G.NewGraph()
			x := gradcheck.Input(g, tensor.Float32, rng, "x", c.x...)
			w := gradcheck.Input(g, tensor.Float32, rng, "w", c.w...)
			var b *G.Node
			if c.bias {
				b = gradcheck.Input(g, tensor.Float32, rng, "b", c.w[0])
			}
			y, err := Conv2d(x, w, b, c.o)
			if err != nil {
				t.Fatal(err)
			}
			gm, n := y.Op().(*conv2dOp).g, c.x[0]
			want := c.gather && lv == simd.AVX512
			if got := convGather(&gm); got != want {
				t.Fatalf("%v %s: convGather %v, want %v", lv, c.name, got, want)
			}
			if !want {
				continue
			}
			ins := []G.Value{x.Value(), w.Value()}
			if c.bias {
				ins = append(ins, b.Value())
			}
			// gathered runs the gathered forward itself, so that a refusal (and the GEMM path
			// computing y instead) fails the test.
			gathered := func(threads int) []float32 {
				if threads > 1 {
					setTestThreads(t, threads)
					defer testThreads.Store(0)
				}
				op := &conv2dOp{kernBase: newKernBase("y", len(ins)), g: gm, n: n, sc: new(convScratch)}
				var bv []float32
				if c.bias {
					bv = b.Value().Data().([]float32)
				}
				yv := make([]float32, y.Shape().TotalSize())
				if !convGatherForward(op, x.Value().Data().([]float32), w.Value().Data().([]float32), bv, yv) {
					t.Fatalf("%v %s: the gathered forward refused", lv, c.name)
				}
				return yv
			}
			// gemmPath runs the op with the gathered forward off.
			gemmPath := func(ins []G.Value) []float64 {
				gatherOff.Store(true)
				defer gatherOff.Store(false)
				v, err := (&conv2dOp{kernBase: newKernBase("y", len(ins)), g: gm, n: n, sc: new(convScratch)}).Do(ins...)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				return cvF64s(v)
			}
			got := gathered(1)
			if !sameBits(gathered(2), got) {
				t.Errorf("%v %s: 2 threads differ from 1", lv, c.name)
			}
			if !c.bias {
				for i, v := range gemmPath(ins) {
					if float64(got[i]) != v {
						t.Fatalf("%v %s: y[%d] = %g gathered, %g through the GEMM path", lv, c.name, i, got[i], v)
					}
				}
				continue
			}
			f64 := make([]G.Value, len(ins))
			for i, v := range ins {
				f64[i] = tensor.New(tensor.WithBacking(cvF64s(v)), tensor.WithShape(v.Shape().Clone()...))
			}
			if e := maxRelDiff(f32to64(got), gemmPath(f64)); e > 1e-5 {
				t.Errorf("%v %s: gathered y differs from float64 by %.3g (max-norm relative, bound 1e-5)", lv, c.name, e)
			}
		}
	})
}
