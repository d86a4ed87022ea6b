package ops

import (
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestConv2dKeptColumns: the filter gradient uses the forward's kept columns only for the
// very x the forward read. For the per-image and the batched path, float64: dw after a
// forward on x equals dw of a fresh op that never ran the forward (which runs im2col
// itself), and dw of another x after a forward on x equals that other x's fresh dw. On the
// batched path, and for another x, both compute the same sums in the same order (bound 0);
// on the per-image path the kept columns make dw one GEMM over the batch where the fresh op
// accumulates one GEMM per image, a different order of the same sums (bound 1e-13, a few
// hundred float64 roundings).
func TestConv2dKeptColumns(t *testing.T) {
	for _, c := range convCases {
		for _, mode := range []struct {
			name  string
			pix   int
			bound float64 // for the same x
		}{{"per-image", 0, 1e-13}, {"batched", 1 << 20, 0}} {
			t.Run(c.name+"/"+mode.name, func(t *testing.T) {
				rng := rand.New(rand.NewSource(3))
				xs := append([]int{4}, c.x[1:]...)
				g := G.NewGraph()
				x := gradcheck.Input(g, tensor.Float64, rng, "x", xs...)
				w := gradcheck.Input(g, tensor.Float64, rng, "w", c.w...)
				y, err := Conv2d(x, w, nil, c.o)
				if err != nil {
					t.Fatal(err)
				}
				gm := y.Op().(*conv2dOp).g
				gm.batchPix = mode.pix
				dy := gradcheck.Rand(rng, tensor.Float64, y.Shape()...)
				other := gradcheck.Rand(rng, tensor.Float64, xs...)
				dw := func(sc *convScratch, xv G.Value) []float64 {
					op := &convFilterGradOp{kernBase: newKernBase("dw", 2), g: gm, n: 4, sc: sc}
					v, err := op.Do(xv, dy)
					if err != nil {
						t.Fatal(err)
					}
					return append([]float64(nil), cvF64s(v)...)
				}
				sc := new(convScratch)
				fwd := &conv2dOp{kernBase: newKernBase("y", 2), g: gm, n: 4, sc: sc}
				if _, err := fwd.Do(x.Value(), w.Value()); err != nil {
					t.Fatal(err)
				}
				if kept := convKept(&gm, sc, 4, x.Value().Data().([]float64)); kept == nil && !gm.directCols {
					t.Fatal("the forward kept no columns")
				}
				for _, r := range []struct {
					what  string
					xv    G.Value
					bound float64
				}{{"same x", x.Value(), mode.bound}, {"another x", other, 0}} {
					got, want := dw(sc, r.xv), dw(new(convScratch), r.xv)
					if e := maxRelDiff(got, want); e > r.bound {
						t.Errorf("%s: dw after the forward differs from a fresh op's by %.3g (bound %g)", r.what, e, r.bound)
					}
				}
			})
		}
	}
}
