package ops

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// anyLevel takes the implicit convolution at every SIMD level until the test ends, so that
// its AVX2 kernels are tested where GP_SIMD=avx2 selects them (it is taken at AVX-512 only).
func anyLevel(t *testing.T) {
	t.Helper()
	prev := implicitAnyLevel.Swap(true)
	t.Cleanup(func() { implicitAnyLevel.Store(prev) })
}

// gemmPathOnly turns the implicit convolution off until the test ends, for the tests of the
// GEMM path's variants.
func gemmPathOnly(t *testing.T) {
	t.Helper()
	prev := implicitOff.Swap(true)
	t.Cleanup(func() { implicitOff.Store(prev) })
}

// TestConv2dImplicitMatchesGEMM runs float32 convolutions that take the implicit path (Note
// [Implicit convolution]) through it and through the GEMM path, and compares y, dx and dw:
// the same products summed in other orders, so within 1e-5 relative in the max norm (the
// bound between the GEMM path's own variants). It also runs the implicit path at 2 threads,
// which must give the same bits as at 1 (each output is computed by one worker, in one
// order). The cases are the demo model resnet8_s2's convolutions (stride 1 at 14x14, 7x7 and
// 4x4; stride 2 from 28x28, 14x14 and 7x7, 3x3 and 1x1), odd sizes and channel counts that
// leave partial tiles, a 5x5 kernel and a dilated one, with and without a bias.
func TestConv2dImplicitMatchesGEMM(t *testing.T) {
	if !simdOK() {
		t.Skip("the implicit convolution needs the C kernels (SIMD level off)")
	}
	anyLevel(t)
	const tol = 1e-5
	s2p1 := ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}
	cases := []convCase{
		{name: "resnet8_s2 14x14", x: []int{16, 16, 14, 14}, w: []int{16, 16, 3, 3}, o: ConvOpts{Padding: [2]int{1, 1}}},
		{name: "resnet8_s2 7x7", x: []int{16, 32, 7, 7}, w: []int{32, 32, 3, 3}, o: ConvOpts{Padding: [2]int{1, 1}}},
		{name: "resnet8_s2 4x4", x: []int{16, 64, 4, 4}, w: []int{64, 64, 3, 3}, o: ConvOpts{Padding: [2]int{1, 1}}},
		{name: "odd 3x3 bias", x: []int{3, 5, 9, 6}, w: []int{13, 5, 3, 3}, bias: true, o: ConvOpts{Padding: [2]int{1, 1}}},
		{name: "5x5 bias", x: []int{2, 3, 11, 5}, w: []int{7, 3, 5, 5}, bias: true, o: ConvOpts{Padding: [2]int{2, 2}}},
		{name: "dilated", x: []int{2, 4, 8, 11}, w: []int{9, 4, 3, 3}, o: ConvOpts{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}},
		{name: "one line", x: []int{4, 6, 1, 17}, w: []int{19, 6, 3, 3}, bias: true, o: ConvOpts{Padding: [2]int{1, 1}}},
		{name: "resnet8_s2 stem", x: []int{16, 3, 28, 28}, w: []int{16, 3, 3, 3}, o: s2p1},
		{name: "resnet8_s2 14x14 to 7x7", x: []int{16, 16, 14, 14}, w: []int{32, 16, 3, 3}, o: s2p1},
		{name: "resnet8_s2 7x7 to 4x4", x: []int{16, 32, 7, 7}, w: []int{64, 32, 3, 3}, o: s2p1},
		{name: "resnet8_s2 shortcut 14x14", x: []int{16, 16, 14, 14}, w: []int{32, 16, 1, 1}, o: ConvOpts{Stride: [2]int{2, 2}}},
		{name: "resnet8_s2 shortcut 7x7", x: []int{16, 32, 7, 7}, w: []int{64, 32, 1, 1}, o: ConvOpts{Stride: [2]int{2, 2}}},
		{name: "stride 2 odd bias", x: []int{3, 5, 9, 8}, w: []int{13, 5, 3, 3}, bias: true, o: s2p1},
		// Lines of a multiple of 16 pixels: padded planes at AVX-512.
		{name: "resnet18 16x16", x: []int{4, 64, 16, 16}, w: []int{64, 64, 3, 3}, o: ConvOpts{Padding: [2]int{1, 1}}},
		{name: "5x5 bias lines of 32", x: []int{2, 3, 6, 32}, w: []int{5, 3, 5, 5}, bias: true, o: ConvOpts{Padding: [2]int{2, 2}}},
		{name: "dilated lines of 16", x: []int{2, 4, 8, 16}, w: []int{9, 4, 3, 3}, o: ConvOpts{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(11))
			g := G.NewGraph()
			dt := tensor.Float32
			x := gradcheck.Input(g, dt, rng, "x", c.x...)
			w := gradcheck.Input(g, dt, rng, "w", c.w...)
			var b *G.Node
			arity := 2
			if c.bias {
				b, arity = gradcheck.Input(g, dt, rng, "b", c.w[0]), 3
			}
			y, err := Conv2d(x, w, b, c.o)
			if err != nil {
				t.Fatal(err)
			}
			gm := y.Op().(*conv2dOp).g
			if !convImplicit(&gm) {
				t.Fatalf("%+v does not take the implicit path", gm)
			}
			dy := gradcheck.Rand(rng, dt, y.Shape()...)
			n := c.x[0]
			fwdIn := []G.Value{x.Value(), w.Value()}
			if c.bias {
				fwdIn = append(fwdIn, b.Value())
			}
			run := func(off bool, threads int) [][]float64 {
				implicitOff.Store(off)
				defer implicitOff.Store(false)
				if threads > 1 {
					setTestThreads(t, threads)
					defer testThreads.Store(0)
				}
				sc := new(convScratch)
				ops := []kernOp{
					&conv2dOp{kernBase: newKernBase("y", arity), g: gm, n: n, sc: sc},
					&convDataGradOp{kernBase: newKernBase("dx", 2), g: gm, n: n, sc: sc},
					&convFilterGradOp{kernBase: newKernBase("dw", 2), g: gm, n: n, sc: sc},
				}
				ins := [][]G.Value{fwdIn, {w.Value(), dy}, {x.Value(), dy}}
				var got [][]float64
				for i, op := range ops {
					v, err := op.Do(ins[i]...)
					if err != nil {
						t.Fatalf("%v: %v", op, err)
					}
					got = append(got, cvF64s(v))
				}
				return got
			}
			ref := run(true, 1)
			got := run(false, 1)
			two := run(false, 2)
			for i, name := range []string{"y", "dx", "dw"} {
				if e := maxRelDiff(got[i], ref[i]); !(e <= tol) {
					t.Errorf("%s differs from the GEMM path's by %.3g (max-norm relative, bound %g)", name, e, tol)
				}
				for k := range got[i] {
					if math.Float64bits(two[i][k]) != math.Float64bits(got[i][k]) {
						t.Errorf("%s[%d] = %g at 2 threads, %g at 1", name, k, two[i][k], got[i][k])
						break
					}
				}
			}
		})
	}
}

// TestConvImplicitChoice checks which float32 convolutions take the implicit path.
func TestConvImplicitChoice(t *testing.T) {
	if !simdOK() {
		t.Skip("the implicit convolution needs the C kernels (SIMD level off)")
	}
	anyLevel(t)
	pad1 := ConvOpts{Padding: [2]int{1, 1}}
	for _, c := range []struct {
		name string
		x, w []int
		o    ConvOpts
		want bool
	}{
		{"resnet8_s2 14x14", []int{64, 16, 14, 14}, []int{16, 16, 3, 3}, pad1, true},
		{"resnet8_s2 4x4", []int{64, 64, 4, 4}, []int{64, 64, 3, 3}, pad1, true},
		{"resnet18 layer1 at 64x64", []int{16, 64, 16, 16}, []int{64, 64, 3, 3}, pad1, true},
		{"resnet18 layer2: weights past the bound", []int{16, 128, 8, 8}, []int{128, 128, 3, 3}, pad1, false},
		{"2x2: fewer pixels than lanes", []int{16, 8, 2, 2}, []int{8, 8, 3, 3}, pad1, false},
		{"stride 2", []int{4, 16, 14, 14}, []int{32, 16, 3, 3}, ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}, true},
		{"1x1 stride 2", []int{4, 16, 14, 14}, []int{32, 16, 1, 1}, ConvOpts{Stride: [2]int{2, 2}}, true},
		{"7x7 stride 2: offsets past the phase planes", []int{4, 3, 32, 32}, []int{16, 3, 7, 7}, ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{3, 3}}, false},
		{"4x4 stride 4 (swin_t's patch embedding): past the largest stride", []int{8, 3, 224, 224}, []int{96, 3, 4, 4}, ConvOpts{Stride: [2]int{4, 4}}, false},
		{"strides differ", []int{4, 16, 14, 14}, []int{16, 16, 3, 3}, ConvOpts{Stride: [2]int{1, 2}, Padding: [2]int{1, 1}}, false},
		{"no padding: smaller output", []int{4, 16, 14, 14}, []int{16, 16, 3, 3}, ConvOpts{}, false},
		{"1x1 without padding: the GEMM reads x", []int{4, 16, 14, 14}, []int{16, 16, 1, 1}, ConvOpts{}, false},
		{"groups", []int{4, 16, 14, 14}, []int{16, 8, 3, 3}, ConvOpts{Padding: [2]int{1, 1}, Groups: 2}, false},
	} {
		g, err := newConvGeom(tensor.Shape(c.x), tensor.Shape(c.w), c.o)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := convImplicit(&g); got != c.want {
			t.Errorf("%s: convImplicit = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestConvImplicitLevel: the implicit convolution is taken at AVX-512 and not below it
// (convImplicitLevel), unless a test asks for it at every level.
func TestConvImplicitLevel(t *testing.T) {
	g, err := newConvGeom(tensor.Shape{16, 16, 14, 14}, tensor.Shape{16, 16, 3, 3}, ConvOpts{Padding: [2]int{1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		level simd.Level
		any   bool
		want  bool
	}{
		{simd.AVX512, false, true},
		{simd.AVX2, false, false},
		{simd.AVX2, true, true},
		{simd.Off, true, false},
	} {
		if simd.Supported(c.level) != nil {
			continue
		}
		restore, err := simd.Set(c.level)
		if err != nil {
			t.Fatal(err)
		}
		prev := implicitAnyLevel.Swap(c.any)
		got := convImplicit(&g)
		implicitAnyLevel.Store(prev)
		restore()
		if got != c.want {
			t.Errorf("level %s, every level %v: convImplicit = %v, want %v", c.level, c.any, got, c.want)
		}
	}
}

// TestPackShift: the implicit convolution's weight packing against its definitions, the
// forward's wp[r·O + o] = w[o·K + r] and the data gradient's wp[(o·nt + t)·C + c] =
// w[o·K + c·kk + taps[t]], on output channel counts around the forward's blocks of eight
// and tap subsets of a stride-2 phase; every element of wp is checked, and nothing past it
// is written.
func TestPackShift(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, tc := range []struct {
		o, c, kk int
		taps     []int
	}{
		{1, 1, 1, []int{0}}, {3, 2, 9, []int{0, 2, 6, 8}}, {8, 3, 9, []int{4}}, {9, 5, 9, []int{1, 7}},
		{16, 16, 9, []int{3, 5}}, {17, 4, 1, []int{0}}, {64, 32, 9, []int{0, 1, 2, 3, 4, 5, 6, 7, 8}},
	} {
		K := tc.c * tc.kk
		w := make([]float32, tc.o*K)
		for i := range w {
			w[i] = rng.Float32()
		}
		const guard = float32(-7)
		wp := make([]float32, K*tc.o+1)
		wp[K*tc.o] = guard
		packShiftFwd(w, wp, tc.o, K)
		for o := 0; o < tc.o; o++ {
			for r := 0; r < K; r++ {
				if wp[r*tc.o+o] != w[o*K+r] {
					t.Fatalf("O=%d K=%d: forward wp[%d·O+%d] = %v, want w[%d·K+%d] = %v", tc.o, K, r, o, wp[r*tc.o+o], o, r, w[o*K+r])
				}
			}
		}
		if wp[K*tc.o] != guard {
			t.Fatalf("O=%d K=%d: forward packing wrote past wp", tc.o, K)
		}
		nt := len(tc.taps)
		bp := make([]float32, tc.o*nt*tc.c+1)
		bp[len(bp)-1] = guard
		packShiftBwd(w, bp, tc.o, tc.c, tc.kk, tc.taps)
		for o := 0; o < tc.o; o++ {
			for ti, q := range tc.taps {
				for c := 0; c < tc.c; c++ {
					if got, want := bp[(o*nt+ti)*tc.c+c], w[o*K+c*tc.kk+q]; got != want {
						t.Fatalf("O=%d C=%d taps %v: data gradient's row %d·%d+%d column %d = %v, want %v", tc.o, tc.c, tc.taps, o, nt, ti, c, got, want)
					}
				}
			}
		}
		if bp[len(bp)-1] != guard {
			t.Fatalf("O=%d C=%d taps %v: data gradient's packing wrote past wp", tc.o, tc.c, tc.taps)
		}
	}
}
