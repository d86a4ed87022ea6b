package ops

import (
	"math"
	"math/rand"
	"testing"
)

// The AVX-512 kernels (simd_cgo.go) against their Go counterparts, on sizes that are not
// multiples of the vector width, including 0 and 1. Without cgo or AVX-512 the simd
// functions are the Go ones and the tests compare the Go code with itself.

// TestSimdGELUMatchesGo: within one float32 ulp of gelu32Fwd/gelu32Bwd. Both evaluate the
// same float64 polynomials; the C kernels fuse multiply-adds, which changes the float64
// result in its last bits, and that can move the float32 rounding by one ulp at most.
func TestSimdGELUMatchesGo(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 2, -2, 1.9999999, -1.9999999, 2.0000002, -2.0000002,
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
	geoms := []convGeom{
		{C: 3, H: 7, W: 9, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1},
		{C: 2, H: 33, W: 35, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1},
		{C: 4, H: 11, W: 13, KH: 3, KW: 2, SH: 2, SW: 2, PH: 1, PW: 0, DH: 1, DW: 2},
		{C: 3, H: 19, W: 21, KH: 7, KW: 7, SH: 2, SW: 2, PH: 3, PW: 3, DH: 1, DW: 1},
		{C: 5, H: 5, W: 5, KH: 1, KW: 1, SH: 2, SW: 2, PH: 0, PW: 0, DH: 1, DW: 1},
		{C: 2, H: 1, W: 1, KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1},
		{C: 1, H: 17, W: 17, KH: 3, KW: 3, SH: 1, SW: 1, PH: 2, PW: 2, DH: 2, DW: 2},
	}
	rng := rand.New(rand.NewSource(4))
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
			kk := g.KH * g.KW
			for i := range dw {
				dw[i], dg[i] = 5, 5
			}
			col2imIndexedAdd(sc.idx[lo*kk*P:hi*kk*P], P, col[lo*kk*ld:], dw, ld)
			simdCol2imIndexedAdd(sc.idx[lo*kk*P:hi*kk*P], P, col[lo*kk*ld:], dg, ld)
			eqCheck(t, gi, "col2im indexed", dw, dg)
		}
	}
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
