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

// The C kernels (internal/simd, through simd.go) against their Go counterparts at every SIMD
// level the CPU has (simdtest.Each: off, avx2, avx512; the levels it cannot run are skipped
// with the reason), on sizes that are not multiples of the vector width, including 0 and 1.
// At level off the wrappers run the Go code and the tests compare it with itself.

// TestSimdGELUMatchesGo: within one float32 ulp of gelu32Fwd/gelu32Bwd. Both evaluate the
// same float64 polynomials; the C kernels fuse multiply-adds, which changes the float64
// result in its last bits, and that can move the float32 rounding by one ulp at most.
func TestSimdGELUMatchesGo(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		special := []float32{0, float32(math.Copysign(0, -1)), 2, -2, 1.9999999, -1.9999999, 2.0000002, -2.0000002,
			3, -3, 2.9999998, -2.9999998, 3.0000002, -3.0000002,
			30, -30, 31, -31, 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-30, -1e-30}
		rng := rand.New(rand.NewSource(3))
		for _, n := range []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 33, 100, 1001} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 3)
				if i%5 == 0 {
					x[i] = special[(i/5)%len(special)]
				}
			}
			dy := make([]float32, n)
			for i := range dy {
				dy[i] = float32(rng.NormFloat64())
			}
			want, got := make([]float32, n), make([]float32, n+1)
			got[n] = 42 // a sentinel: nothing past n is written
			gelu32Fwd(x, want)
			simdGELUFwd(x, got[:n])
			ulpCheck(t, "forward", n, x, want, got[:n])
			gelu32Bwd(x, dy, want)
			simdGELUBwd(x, dy, got[:n])
			ulpCheck(t, "backward", n, x, want, got[:n])
			if got[n] != 42 {
				t.Errorf("n=%d: element past the end written", n)
			}
		}
	})
}

func ulpCheck(t *testing.T, what string, n int, x, want, got []float32) {
	t.Helper()
	for i := range want {
		w, g := want[i], got[i]
		if math.IsNaN(float64(w)) || math.IsNaN(float64(g)) {
			if math.IsNaN(float64(w)) != math.IsNaN(float64(g)) {
				t.Errorf("%s n=%d x=%g: got %g, want %g", what, n, x[i], g, w)
			}
			continue
		}
		d := int64(math.Float32bits(w)) - int64(math.Float32bits(g))
		if (w < 0) != (g < 0) && w != 0 && g != 0 || d > 1 || d < -1 {
			t.Errorf("%s n=%d x=%g: got %g, want %g (more than one ulp)", what, n, x[i], g, w)
		}
	}
}

// TestSimdIm2colMatchesGo: the C im2col and col2im equal the Go loops exactly (im2col only
// copies; col2im adds in the same order), for both the line and the indexed paths, odd
// sizes, strides, padding, dilation and channel ranges.
func TestSimdIm2colMatchesGo(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		geoms := []convGeom{
			{C: 3, H: 7, W: 9, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1},
			{C: 2, H: 33, W: 35, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1},
			{C: 4, H: 11, W: 13, KH: 3, KW: 2, SH: 2, SW: 2, PH: 1, PW: 0, DH: 1, DW: 2},
			{C: 3, H: 19, W: 21, KH: 7, KW: 7, SH: 2, SW: 2, PH: 3, PW: 3, DH: 1, DW: 1},
			{C: 5, H: 5, W: 5, KH: 1, KW: 1, SH: 2, SW: 2, PH: 0, PW: 0, DH: 1, DW: 1},
			{C: 2, H: 1, W: 1, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1},
			{C: 1, H: 17, W: 17, KH: 3, KW: 3, SH: 1, SW: 1, PH: 2, PW: 2, DH: 2, DW: 2},
			{C: 3, H: 64, W: 69, KH: 7, KW: 7, SH: 2, SW: 2, PH: 3, PW: 3, DH: 1, DW: 1}, // stride-2 lines over 16
			{C: 2, H: 9, W: 40, KH: 1, KW: 3, SH: 3, SW: 3, PH: 0, PW: 1, DH: 1, DW: 1},
			{C: 3, H: 16, W: 16, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1}, // lines of exactly 16
			{C: 2, H: 20, W: 64, KH: 7, KW: 7, SH: 2, SW: 2, PH: 3, PW: 3, DH: 1, DW: 1}, // stride 2, lines of 32
			{C: 2, H: 6, W: 37, KH: 5, KW: 4, SH: 1, SW: 1, PH: 2, PW: 3, DH: 1, DW: 2},  // stride 1, dilated, lines of 33
			{C: 2, H: 7, W: 50, KH: 3, KW: 5, SH: 2, SW: 2, PH: 1, PW: 4, DH: 1, DW: 3},  // stride 2, dilated, wide padding
			{C: 1, H: 4, W: 3, KH: 1, KW: 9, SH: 1, SW: 2, PH: 0, PW: 4, DH: 1, DW: 1},   // kernel wider than the image
			{C: 3, H: 8, W: 8, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1},   // whole planes: 64 pixels
			{C: 3, H: 2, W: 2, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1},   // 4 pixels
			{C: 2, H: 5, W: 3, KH: 3, KW: 1, SH: 1, SW: 1, PH: 0, PW: 0, DH: 1, DW: 1},   // unpadded lines, shorter output
			{C: 2, H: 9, W: 7, KH: 2, KW: 3, SH: 1, SW: 1, PH: 3, PW: 1, DH: 2, DW: 1},   // rows of padding only
		}
		rng := rand.New(rand.NewSource(4))
		shiftable := 0
		defer func() {
			if simdOK() && shiftable == 0 {
				t.Error("no geometry took the shifted-plane im2col")
			}
		}()
		for gi, g := range geoms {
			g.OH = convOutSize(g.H, g.KH, g.SH, g.PH, g.DH)
			g.OW = convOutSize(g.W, g.KW, g.SW, g.PW, g.DW)
			g.Groups = 1
			P := g.OH * g.OW
			ld := P + 3 // a wider row, as in the batched path
			x := make([]float32, g.C*g.H*g.W)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			rows := g.colRows()
			for _, r := range [][2]int{{0, g.C}, {1, g.C}, {0, 1}, {g.C - 1, g.C}, {1, 1}} {
				lo, hi := r[0], r[1]
				want, got := make([]float32, rows*ld), make([]float32, rows*ld)
				for i := range want {
					want[i], got[i] = -7, -7
				}
				im2colRange(&g, x, want, ld, lo, hi)
				simdIm2colRange(&g, x, got, ld, lo, hi)
				eqCheck(t, gi, "im2col", want, got)
				var sc convScratch
				sc.colIndex(&g)
				for i := range got {
					got[i] = -7
				}
				simdIm2colGather(&g, &sc, x, got, ld, lo, hi)
				eqCheck(t, gi, "im2col gather", want, got)
				if convShiftable(&g) {
					shiftable++
					sc.shiftTable(&g)
					for i := range got {
						got[i] = -7
					}
					simdIm2colShift(&g, &sc, x, got, ld, lo, hi)
					eqCheck(t, gi, "im2col shift", want, got)
					for i := range got {
						got[i] = -7
					}
					convIm2colRange(&g, &sc, false, x, got, ld, lo, hi)
					eqCheck(t, gi, "convIm2colRange (shift)", want, got)
				}

				col := make([]float32, rows*ld)
				for i := range col {
					col[i] = float32(rng.NormFloat64())
				}
				dw, dg := make([]float32, len(x)), make([]float32, len(x))
				for i := range dw {
					dw[i], dg[i] = 5, 5
				}
				col2imRange(&g, col, dw, ld, lo, hi)
				simdCol2imRange(&g, col, dg, ld, lo, hi)
				eqCheck(t, gi, "col2im", dw, dg)
				if convShiftable(&g) {
					for i := range dg {
						dg[i] = 5
					}
					simdCol2imShift(&g, &sc, col, dg, ld, lo, hi)
					eqCheck(t, gi, "col2im shift", dw, dg)
					for i := range dg {
						dg[i] = 5
					}
					convCol2imRange(&g, &sc, convIndexed(&g), col, dg, ld, lo, hi)
					eqCheck(t, gi, "convCol2imRange (shift)", dw, dg)
				}
				kk := g.KH * g.KW
				for i := range dw {
					dw[i], dg[i] = 5, 5
				}
				col2imIndexedAdd(sc.idx[lo*kk*P:hi*kk*P], P, col[lo*kk*ld:], dw, ld)
				simdCol2imIndexedAdd(sc.idx[lo*kk*P:hi*kk*P], P, col[lo*kk*ld:], dg, ld)
				eqCheck(t, gi, "col2im indexed", dw, dg)
			}
		}
	})
}

func eqCheck(t *testing.T, gi int, what string, want, got []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Errorf("geometry %d %s: element %d = %g, want %g", gi, what, i, got[i], want[i])
			return
		}
	}
}

// withGo runs f with the C kernels off (the Go code), then restores the SIMD level.
func withGo(t *testing.T, f func()) {
	t.Helper()
	restore, err := simd.Set(simd.Off)
	if err != nil {
		t.Fatal(err)
	}
	defer restore()
	f()
}

func randF32(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64()*scale + 0.3)
	}
	return x
}

func randF64(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}

// closeF64: the C reductions add in eight lanes, Go in four or one, so float64 sums differ
// in their last bits; 1e-12 relative to the largest magnitude is far above that and far
// below anything a float32 result could show.
func closeF64(t *testing.T, what string, want, got []float64) {
	t.Helper()
	scale := 1e-300
	for _, v := range want {
		scale = max(scale, math.Abs(v))
	}
	for i := range want {
		if math.Abs(want[i]-got[i]) > 1e-12*scale {
			t.Errorf("%s[%d] = %.17g, want %.17g", what, i, got[i], want[i])
			return
		}
	}
}

// closeF32: float32 results computed from those float64s (or with the same formulas in
// another order) may round differently by an ulp, or a little more where a difference
// cancels: 4e-7 of the largest magnitude.
func closeF32(t *testing.T, what string, want, got []float32) {
	t.Helper()
	scale := float32(1e-30)
	for _, v := range want {
		scale = max(scale, float32(math.Abs(float64(v))))
	}
	for i := range want {
		if math.Abs(float64(want[i]-got[i])) > 4e-7*float64(scale) || math.IsNaN(float64(got[i])) != math.IsNaN(float64(want[i])) {
			t.Errorf("%s[%d] = %g, want %g", what, i, got[i], want[i])
			return
		}
	}
}

// TestSimdNormMatchesGo compares the batch-norm, layer-norm and ReLU kernels with the Go
// code on odd sizes, including empty and single-element rows.
func TestSimdNormMatchesGo(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		rng := rand.New(rand.NewSource(5))
		for _, sz := range [][3]int{{1, 1, 1}, {2, 3, 0}, {3, 5, 1}, {2, 4, 7}, {2, 3, 8}, {3, 2, 15}, {3, 3, 17}, {2, 2, 100}, {1, 1, 257}} {
			n, c, hw := sz[0], sz[1], sz[2]
			x, dy, sel := randF32(rng, n*c*hw, 2), randF32(rng, n*c*hw, 1), randF32(rng, n*c*hw, 1)
			mean, istd, gamma, beta := randF64(rng, c), randF64(rng, c), randF64(rng, c), randF64(rng, c)
			k1, k2, k3 := randF64(rng, c), randF64(rng, c), randF64(rng, c)
			k2[0], k3[0] = 0, 0 // the k1·dy-only path
			type out struct {
				sum, sq, sdy, sdyx, msdy, msdyx []float64
				y, yr, dx, mdx, relu            []float32
			}
			run := func() out {
				o := out{sum: make([]float64, c), sq: make([]float64, c), sdy: make([]float64, c), sdyx: make([]float64, c),
					msdy: make([]float64, c), msdyx: make([]float64, c), y: make([]float32, len(x)),
					yr: make([]float32, len(x)), dx: make([]float32, len(x)), mdx: make([]float32, len(x)),
					relu: make([]float32, len(x))}
				bnSums(x, n, c, hw, o.sum, o.sq)
				bnGradSums(x, dy, nil, n, c, hw, mean, o.sdy, o.sdyx)
				bnGradSums(x, dy, sel, n, c, hw, mean, o.msdy, o.msdyx)
				bnApply(x, o.y, n, c, hw, mean, istd, gamma, beta, false)
				bnApply(x, o.yr, n, c, hw, mean, istd, gamma, beta, true)
				bnGradApply(x, dy, nil, o.dx, n, c, hw, k1, k2, k3)
				bnGradApply(x, dy, sel, o.mdx, n, c, hw, k1, k2, k3)
				reluBits32(x, o.relu, dy)
				return o
			}
			got := run()
			var want out
			withGo(t, func() { want = run() })
			closeF64(t, "bn sum", want.sum, got.sum)
			closeF64(t, "bn sq", want.sq, got.sq)
			closeF64(t, "bn sdy", want.sdy, got.sdy)
			closeF64(t, "bn sdyx", want.sdyx, got.sdyx)
			closeF64(t, "bn sdy masked", want.msdy, got.msdy)
			closeF64(t, "bn sdyx masked", want.msdyx, got.msdyx)
			// The elementwise kernels round exactly like the Go code: no fused multiply-adds.
			eqCheck(t, n*100+c*10+hw, "bn apply", want.y, got.y)
			eqCheck(t, n*100+c*10+hw, "bn apply relu", want.yr, got.yr)
			eqCheck(t, n*100+c*10+hw, "bn grad apply", want.dx, got.dx)
			eqCheck(t, n*100+c*10+hw, "bn grad apply masked", want.mdx, got.mdx)
			eqCheck(t, n*100+c*10+hw, "relu", want.relu, got.relu)
		}
		for _, sz := range [][2]int{{1, 1}, {3, 7}, {5, 8}, {4, 9}, {3, 96}, {2, 100}, {7, 385}} {
			rows, m := sz[0], sz[1]
			x, dy := randF32(rng, rows*m, 3), randF32(rng, rows*m, 1)
			mk := func() *lnOp {
				return &lnOp{rows: rows, m: m, eps: 1e-5, gamma: randF64(rand.New(rand.NewSource(6)), m),
					beta: randF64(rand.New(rand.NewSource(7)), m), mean: make([]float64, rows), istd: make([]float64, rows),
					dgamma: make([]float64, m), dbeta: make([]float64, m)}
			}
			run := func() (*lnOp, []float32, []float32) {
				op := mk()
				y, dx := make([]float32, rows*m), make([]float32, rows*m)
				lnForward(x, y, op)
				lnBackward(x, dy, dx, op)
				return op, y, dx
			}
			gop, gy, gdx := run()
			var wop *lnOp
			var wy, wdx []float32
			withGo(t, func() { wop, wy, wdx = run() })
			closeF64(t, "ln mean", wop.mean, gop.mean)
			closeF64(t, "ln istd", wop.istd, gop.istd)
			closeF64(t, "ln dgamma", wop.dgamma, gop.dgamma)
			closeF64(t, "ln dbeta", wop.dbeta, gop.dbeta)
			closeF32(t, "ln y", wy, gy)
			closeF32(t, "ln dx", wdx, gdx)
		}
	})
}

// TestSimdColSumsMatchesGo: biasGrad's column sums in C equal the Go loop's bit for bit
// (both add the rows in order), for widths around the vector width and 1 or odd rows; with
// no rows the sums are 0.
func TestSimdColSumsMatchesGo(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		rng := rand.New(rand.NewSource(10))
		for _, sz := range [][2]int{{1, 64}, {3, 65}, {7, 96}, {33, 100}, {5, 1000}} {
			rows, c := sz[0], sz[1]
			dy := randF32(rng, rows*c, 1)
			op := &biasGradOp{n: rows, c: c, inner: 1, dims: 2}
			in := []G.Value{tensor.New(tensor.WithShape(rows, c), tensor.WithBacking(dy))}
			got, want := make([]float32, c), make([]float32, c)
			for i := range got {
				got[i], want[i] = 7, 7 // overwritten
			}
			if err := biasGrad(op, in, got); err != nil {
				t.Fatal(err)
			}
			withGo(t, func() {
				if err := biasGrad(op, in, want); err != nil {
					t.Fatal(err)
				}
			})
			eqCheck(t, rows*10000+c, "col sums", want, got)
		}
		if simdOK() {
			db := []float32{7, 7, 7}
			simdColSums(nil, 0, 3, db)
			eqCheck(t, 0, "col sums of no rows", []float32{0, 0, 0}, db)
		}
	})
}

// TestSimdMaxPoolMatchesGo: the C max-pool search gives the Go search's positions and
// values bit for bit on inputs full of ties, NaNs and signed zeros, for 3x3 and other
// windows, strides and paddings (so border windows too), on a range of planes; the C
// gradient scatter equals the Go one.
func TestSimdMaxPoolMatchesGo(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		rng := rand.New(rand.NewSource(11))
		vals := []float32{-1, 0, 2, float32(math.NaN()), float32(math.Copysign(0, -1))}
		for gi, c := range []struct{ k, s, p, h, w int }{{3, 2, 1, 9, 8}, {3, 1, 1, 7, 7}, {3, 1, 0, 5, 6}, {2, 2, 0, 8, 9}, {2, 1, 1, 3, 3}, {3, 2, 1, 1, 1}, {5, 3, 2, 11, 13}} {
			g := convGeom{C: 3, H: c.h, W: c.w, KH: c.k, KW: c.k, SH: c.s, SW: c.s, PH: c.p, PW: c.p, DH: 1, DW: 1}
			g.OH, g.OW = convOutSize(g.H, c.k, c.s, c.p, 1), convOutSize(g.W, c.k, c.s, c.p, 1)
			planes, P, hw := 2*g.C, g.OH*g.OW, g.H*g.W
			x := make([]float32, planes*hw)
			for i := range x {
				n := 3
				if rng.Intn(15) == 0 {
					n = len(vals)
				}
				x[i] = vals[rng.Intn(n)]
			}
			for _, r := range [][2]int{{0, planes}, {1, planes - 1}} {
				yw, yg := make([]float32, planes*P), make([]float32, planes*P)
				aw, ag := make([]int32, planes*P), make([]int32, planes*P)
				maxPoolSearch(&g, x, yw, aw, r[0], r[1])
				simdMaxPoolSearch(&g, x, yg, ag, r[0], r[1])
				eqCheck(t, gi, "max-pool values", yw, yg)
				for i := range aw {
					if aw[i] != ag[i] {
						t.Fatalf("geometry %d: arg[%d] = %d, want %d", gi, i, ag[i], aw[i])
					}
				}
				ag2 := make([]int32, planes*P)
				simdMaxPoolSearch(&g, x, nil, ag2, r[0], r[1])
				for i := range aw {
					if aw[i] != ag2[i] {
						t.Fatalf("geometry %d, no y: arg[%d] = %d, want %d", gi, i, ag2[i], aw[i])
					}
				}
			}
			if !simdOK() {
				continue
			}
			dy := randF32(rng, planes*P, 1)
			arg := make([]int32, planes*P)
			maxPoolSearch(&g, x, nil, arg, 0, planes)
			dw, dg := make([]float32, planes*hw), make([]float32, planes*hw)
			for i := range dw {
				dw[i], dg[i] = 5, 5
			}
			for pl := 1; pl < planes; pl++ { // planes [1, planes): plane 0 untouched
				clear(dw[pl*hw : (pl+1)*hw])
				for o, a := range arg[pl*P : (pl+1)*P] {
					dw[pl*hw+int(a)] += dy[pl*P+o]
				}
			}
			simdMaxPoolScatter(arg, dy, dg, 1, planes, P, hw)
			eqCheck(t, gi, "max-pool scatter", dw, dg)
		}
	})
}

// TestSimdScaleMatchesGo: drop-path's kept runs scaled in C equal the Go loop bit for bit,
// for run lengths around the vector width (and below simdMinLen, where Go runs).
func TestSimdScaleMatchesGo(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		rng := rand.New(rand.NewSource(12))
		for _, row := range []int{1, 17, 64, 65, 100} {
			x := randF32(rng, 7*row, 1)
			got, want := make([]float32, len(x)), make([]float32, len(x))
			applyMask(x, got, 99, 0.3, row)
			withGo(t, func() { applyMask(x, want, 99, 0.3, row) })
			eqCheck(t, row, "drop-path scale", want, got)
		}
	})
}
