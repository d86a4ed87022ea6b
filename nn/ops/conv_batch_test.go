package ops

import (
	"math"
	"math/rand"
	"runtime"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestConv2dBatchedMatchesPerImage runs every convCase, with a batch of 5, through the
// per-image path, the batched path in one chunk, and the batched path in chunks of 2, 2 and
// 1 images, and compares y, dx and dw. The paths sum in different orders, so they agree to
// rounding: 1e-12 relative (max-norm) in float64, 1e-5 in float32. The implicit convolution
// is off: it would take the float32 cases of stride 1 in every mode.
func TestConv2dBatchedMatchesPerImage(t *testing.T) {
	gemmPathOnly(t)
	for _, c := range convCases {
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				tol := 1e-12
				if dt == tensor.Float32 {
					tol = 1e-5
				}
				rng := rand.New(rand.NewSource(7))
				xs := append([]int{5}, c.x[1:]...)
				g := G.NewGraph()
				x := gradcheck.Input(g, dt, rng, "x", xs...)
				w := gradcheck.Input(g, dt, rng, "w", c.w...)
				y, err := Conv2d(x, w, nil, c.o)
				if err != nil {
					t.Fatal(err)
				}
				fwd := y.Op().(*conv2dOp)
				dy := gradcheck.Rand(rng, dt, y.Shape()...)
				gm := fwd.g
				P := gm.OH * gm.OW
				elem := 8
				if dt == tensor.Float32 {
					elem = 4
				}
				modes := []struct {
					name            string
					pix, bytes, per int // batchPix, batchBytes, want batchChunk
				}{
					{"per-image", 0, convBatchBytes, 0},
					{"one chunk", 1 << 20, convBatchBytes, 5},
					{"chunks 2,2,1", 1 << 20, 2 * max(gm.colRows(), gm.Out) * P * elem, 2},
				}
				var ref [][]float64
				for _, m := range modes {
					gm.batchPix, gm.batchBytes = m.pix, m.bytes
					if got := gm.batchChunk(5, elem); got != m.per {
						t.Fatalf("%s: batchChunk = %d, want %d", m.name, got, m.per)
					}
					// Fresh ops with a fresh scratch for each mode: nothing carries over.
					sc := new(convScratch)
					ops := []kernOp{
						&conv2dOp{kernBase: newKernBase("y", 2), g: gm, n: 5, sc: sc},
						&convDataGradOp{kernBase: newKernBase("dx", 2), g: gm, n: 5, sc: sc},
						&convFilterGradOp{kernBase: newKernBase("dw", 2), g: gm, n: 5, sc: sc},
					}
					ins := [][]G.Value{{x.Value(), w.Value()}, {w.Value(), dy}, {x.Value(), dy}}
					var got [][]float64
					for i, op := range ops {
						v, err := op.Do(ins[i]...)
						if err != nil {
							t.Fatalf("%s: %v: %v", m.name, op, err)
						}
						got = append(got, cvF64s(v))
					}
					if ref == nil {
						ref = got
						continue
					}
					for i, name := range []string{"y", "dx", "dw"} {
						if e := maxRelDiff(got[i], ref[i]); e > tol {
							t.Errorf("%s: %s differs from the per-image path by %.3g (max-norm relative, bound %g)", m.name, name, e, tol)
						}
					}
				}
			})
		}
	}
}

// maxRelDiff is max|a-b| / max|b|.
func maxRelDiff(a, b []float64) float64 {
	var d, n float64
	for i := range b {
		d = max(d, math.Abs(a[i]-b[i]))
		n = max(n, math.Abs(b[i]))
	}
	if n == 0 {
		return d
	}
	return d / n
}

// TestConv2dBatchChunk checks which resnet convolutions take the batched path (float32).
func TestConv2dBatchChunk(t *testing.T) {
	for _, c := range []struct {
		name          string
		n, c, h, o, k int
		stride, pad   int
		want          int
	}{
		{"layer4 at 32x32: 1x1 out", 32, 512, 1, 512, 3, 1, 1, 32},
		{"layer4 at 64x64: 2x2 out", 16, 512, 2, 512, 3, 1, 1, 16},
		{"layer3 at 64x64: 4x4 out", 32, 256, 4, 256, 3, 1, 1, 32},
		{"downsample 1x1 s2: 4x4 out", 32, 128, 8, 256, 1, 2, 0, 32},
		{"layer4 at 224: 7x7 out, 9 MB weights", 32, 512, 7, 512, 3, 1, 1, 32},
		{"layer4 at 224, batch 96: 3 chunks of 32 (37 fit in 32 MB)", 96, 512, 7, 512, 3, 1, 1, 32},
		{"layer3 at 112: 7x7 out, 2.4 MB weights", 32, 256, 7, 256, 3, 1, 1, 0},
		{"layer2 at 64x64: 8x8 out", 32, 128, 8, 128, 3, 1, 1, 0},
		{"layer1 at 64x64: 16x16 out", 32, 64, 16, 64, 3, 1, 1, 0},
		{"batch of one", 1, 512, 2, 512, 3, 1, 1, 0},
	} {
		g, err := newConvGeom(tensor.Shape{c.n, c.c, c.h, c.h}, tensor.Shape{c.o, c.c, c.k, c.k},
			ConvOpts{Stride: [2]int{c.stride, c.stride}, Padding: [2]int{c.pad, c.pad}})
		if err != nil {
			t.Fatal(err)
		}
		if got := g.batchChunk(c.n, 4); got != c.want {
			t.Errorf("%s: batchChunk = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestConv2dBatchedNoBufferAllocs: the batched path reuses its column and [O, N*Ho*Wo]
// buffers across runs, as the per-image path does (TestConv2dNoBufferAllocs); the buffers
// are 36 to 74 KiB here, the bound what tensor's interface boxing and gonum's GEMM leave.
// The implicit convolution, which would take this 3x3 on 4x4, is off.
func TestConv2dBatchedNoBufferAllocs(t *testing.T) {
	gemmPathOnly(t)
	rng := rand.New(rand.NewSource(1))
	g := G.NewGraph()
	x := gradcheck.Input(g, tensor.Float32, rng, "x", 8, 16, 4, 4)
	w := gradcheck.Input(g, tensor.Float32, rng, "w", 16, 16, 3, 3)
	b := gradcheck.Input(g, tensor.Float32, rng, "b", 16)
	y := cvMust(Conv2d(x, w, b, ConvOpts{Padding: [2]int{1, 1}}))
	grads, err := G.Grad(cvMust(G.Sum(y)), x, w)
	if err != nil {
		t.Fatal(err)
	}
	if nb := y.Op().(*conv2dOp).g.batchChunk(8, 4); nb != 8 {
		t.Fatalf("batchChunk = %d, want the batched path in one chunk of 8", nb)
	}
	dy := gradcheck.Rand(rng, tensor.Float32, y.Shape()...)
	xv, wv, bv := x.Value(), w.Value(), b.Value()
	step := func() {
		for _, r := range []struct {
			op G.Op
			in []G.Value
		}{{y.Op(), []G.Value{xv, wv, bv}}, {grads[0].Op(), []G.Value{wv, dy}}, {grads[1].Op(), []G.Value{xv, dy}}} {
			if _, err := r.op.Do(r.in...); err != nil {
				t.Fatal(err)
			}
		}
	}
	step()
	allocs := testing.AllocsPerRun(10, step)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const runs = 10
	for range runs {
		step()
	}
	runtime.ReadMemStats(&m1)
	bound := uint64(4 << 10)
	if blasimpl.Name() == "gonum" {
		bound = 16 << 10
	}
	if perCall := (m1.TotalAlloc - m0.TotalAlloc) / runs; perCall > bound {
		t.Errorf("batched forward+backward allocates %d bytes (%.0f allocations) per call with %s, want < %d", perCall, allocs, blasimpl.Name(), bound)
	} else {
		t.Logf("%d bytes (%.0f allocations) per batched forward+backward", perCall, allocs)
	}
}

// TestIm2colIndexedMatchesLoops: im2col and col2im through colIndex's table equal the
// loop versions exactly (the same additions in the same order), for every convCase's
// geometry, with rows packed (ld = Ho*Wo) and inside a wider matrix (ld = 3*Ho*Wo), at an
// offset of Ho*Wo into a buffer that holds random values everywhere else.
func TestIm2colIndexedMatchesLoops(t *testing.T) {
	for _, c := range convCases {
		g, err := newConvGeom(tensor.Shape(c.x), tensor.Shape(c.w), c.o)
		if err != nil {
			t.Fatal(err)
		}
		// im2col's and col2im's geometry is the whole input: groups only split the GEMM.
		P, rows, chw := g.OH*g.OW, g.colRows(), g.C*g.H*g.W
		idx := new(convScratch).colIndex(&g)
		rng := rand.New(rand.NewSource(2))
		x := make([]float64, chw)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		for _, ld := range []int{P, 3 * P} {
			a, b := make([]float64, P+rows*ld), make([]float64, P+rows*ld)
			for i := range a {
				a[i] = rng.NormFloat64()
				b[i] = a[i]
			}
			im2col(&g, x, a[P:], ld)
			e := slices.Clone(b)
			im2colIndexed(idx, P, x, b[P:], ld)
			if !slices.Equal(a, b) {
				t.Errorf("%s, ld %d: indexed im2col differs from the loops", c.name, ld)
			}
			sc := new(convScratch)
			sc.colIndex(&g)
			im2colGather(&g, sc, x, e[P:], ld, 0, g.C)
			if !slices.Equal(a, e) {
				t.Errorf("%s, ld %d: im2colGather differs from the loops", c.name, ld)
			}
			da, db := make([]float64, chw), make([]float64, chw)
			for i := range da {
				da[i], db[i] = 1, 2 // both overwrite dx
			}
			col2im(&g, a[P:], da, ld)
			col2imIndexed(idx, P, b[P:], db, ld)
			if !slices.Equal(da, db) {
				t.Errorf("%s, ld %d: indexed col2im differs from the loops", c.name, ld)
			}
		}
	}
}
