//go:build cgo && amd64 && !purego

package ops

// AVX-512 kernels in C for the float32 loops that dominate a training step outside the
// GEMMs: GELU (Swin), im2col and col2im (ResNet). Go's compiler does not vectorise, and
// these loops are short rows (a 16-pixel line of an im2col row, an 8-wide double-precision
// polynomial) where Go's bounds checks and scalar code cost 3-8x. Each kernel computes what
// its Go counterpart does (the same algorithm, the same float64 polynomials for GELU), and
// runs only when the CPU has AVX-512 (simdOK); otherwise, and without cgo, the Go code runs.
// simd_test.go compares each with its Go counterpart.

/*
#cgo CFLAGS: -O3
#include "simd_kern.h"
#include "simd_norm.h"
*/
import "C"

import "unsafe"

// simdMinLen is the shortest slice worth a cgo call for the elementwise kernels (a call
// costs about as much as 50 elements of the Go loop).
const simdMinLen = 64

// simdOK reports whether the CPU runs the AVX-512 kernels (checked once, at start-up).
var simdOK = C.gp_simd_ok() != 0 // a variable so that tests can compare with the Go code

func f32p(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(unsafe.SliceData(s)))
}

func f64p(s []float64) *C.double {
	if len(s) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(unsafe.SliceData(s)))
}

func i32p(s []int32) *C.int {
	if len(s) == 0 {
		return nil
	}
	return (*C.int)(unsafe.Pointer(unsafe.SliceData(s)))
}

// simdGELUFwd is gelu32Fwd (y[i] = x[i]·Φ(x[i]), len(y) >= len(x)) on AVX-512.
func simdGELUFwd(x, y []float32) {
	y = y[:len(x)]
	C.gp_gelu_fwd(f32p(x), f32p(y), C.long(len(x)))
}

// simdGELUBwd is gelu32Bwd on AVX-512.
func simdGELUBwd(x, dy, dx []float32) {
	dy, dx = dy[:len(x)], dx[:len(x)]
	C.gp_gelu_bwd(f32p(x), f32p(dy), f32p(dx), C.long(len(x)))
}

func cGeom(g *convGeom) C.gp_geom {
	return C.gp_geom{C: C.int(g.C), H: C.int(g.H), W: C.int(g.W), KH: C.int(g.KH), KW: C.int(g.KW),
		SH: C.int(g.SH), SW: C.int(g.SW), PH: C.int(g.PH), PW: C.int(g.PW), DH: C.int(g.DH), DW: C.int(g.DW),
		OH: C.int(g.OH), OW: C.int(g.OW)}
}

// simdIm2colRange is im2colRange for float32 on AVX-512.
func simdIm2colRange(g *convGeom, x, col []float32, ld, lo, hi int) {
	if lo >= hi || g.OH*g.OW == 0 {
		return
	}
	cg := cGeom(g)
	_ = col[(hi*g.KH*g.KW-1)*ld+g.OH*g.OW-1]
	_ = x[g.C*g.H*g.W-1]
	C.gp_im2col(&cg, f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi))
}

// simdCol2imRange is col2imRange for float32 on AVX-512.
func simdCol2imRange(g *convGeom, col, dx []float32, ld, lo, hi int) {
	if lo >= hi {
		return
	}
	cg := cGeom(g)
	_ = dx[hi*g.H*g.W-1]
	if g.OH*g.OW > 0 {
		_ = col[(hi*g.KH*g.KW-1)*ld+g.OH*g.OW-1]
	}
	C.gp_col2im(&cg, f32p(col), f32p(dx), C.long(ld), C.int(lo), C.int(hi))
}

// simdIm2colGather is im2colGather for float32 (colIndex's tables built) on AVX-512.
func simdIm2colGather(g *convGeom, sc *convScratch, x, col []float32, ld, lo, hi int) {
	P := g.OH * g.OW
	if lo >= hi || P == 0 {
		return
	}
	_ = col[(hi*g.KH*g.KW-1)*ld+P-1]
	_ = x[hi*g.H*g.W-1]
	C.gp_im2col_gather(f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi), C.int(g.KH*g.KW), C.int(P),
		C.long(g.H*g.W), i32p(sc.gat), i32p(sc.padPos), i32p(sc.padOff))
}

// simdIm2colShift is im2colRange for float32 on AVX-512 when convShiftable(g), through
// sc.shiftTable(g)'s tables (which must be built).
func simdIm2colShift(g *convGeom, sc *convScratch, x, col []float32, ld, lo, hi int) {
	P := g.OH * g.OW
	if lo >= hi || P == 0 {
		return
	}
	_ = col[(hi*g.KH*g.KW-1)*ld+P-1]
	_ = x[hi*g.H*g.W-1]
	C.gp_im2col_shift(f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi), C.int(g.KH*g.KW), C.long(P),
		C.long(g.H*g.W), i32p(sc.shift), (*C.ushort)(unsafe.Pointer(unsafe.SliceData(sc.shiftMask))))
}

// simdCol2imShift is col2imRange for float32 on AVX-512 when convShiftable(g), through
// sc.shiftTable(g)'s tables (which must be built).
func simdCol2imShift(g *convGeom, sc *convScratch, col, dx []float32, ld, lo, hi int) {
	P := g.OH * g.OW
	if lo >= hi {
		return
	}
	_ = dx[hi*g.H*g.W-1]
	if P == 0 {
		clear(dx[lo*g.H*g.W : hi*g.H*g.W])
		return
	}
	_ = col[(hi*g.KH*g.KW-1)*ld+P-1]
	C.gp_col2im_shift(f32p(col), f32p(dx), C.long(ld), C.int(lo), C.int(hi), C.int(g.KH*g.KW), C.long(P),
		C.long(g.H*g.W), i32p(sc.shift), (*C.ushort)(unsafe.Pointer(unsafe.SliceData(sc.shiftMask))))
}

// simdCol2imIndexedAdd is col2imIndexedAdd for float32 on AVX-512.
func simdCol2imIndexedAdd(idx []int32, P int, col, dx []float32, ld int) {
	if len(idx) == 0 || P == 0 {
		return
	}
	rows := len(idx) / P
	_ = col[(rows-1)*ld+P-1]
	C.gp_col2im_indexed_add(i32p(idx), C.long(rows), C.int(P), f32p(col), f32p(dx), C.long(len(dx)), C.long(ld))
}

// simdBNSums is bnSums's loop for channels [lo, hi) of x [n, c, hw].
func simdBNSums(x []float32, n, c, hw, lo, hi int, sum, sq []float64) {
	if lo >= hi {
		return
	}
	_, _ = sum[hi-1], sq[hi-1]
	if hw > 0 {
		_ = x[n*c*hw-1]
	}
	C.gp_bn_sums(f32p(x), C.long(n), C.long(c), C.long(hw), C.long(lo), C.long(hi), f64p(sum), f64p(sq))
}

// simdBNGradSums is bnGradSums's loop for channels [lo, hi).
func simdBNGradSums(x, dy []float32, n, c, hw, lo, hi int, mean, sdy, sdyx []float64) {
	if lo >= hi {
		return
	}
	_, _, _ = mean[hi-1], sdy[hi-1], sdyx[hi-1]
	if hw > 0 {
		_, _ = x[n*c*hw-1], dy[n*c*hw-1]
	}
	C.gp_bn_grad_sums(f32p(x), f32p(dy), C.long(n), C.long(c), C.long(hw), C.long(lo), C.long(hi),
		f64p(mean), f64p(sdy), f64p(sdyx))
}

// simdBNApply is bnApply's loop for rows [lo, hi) (row r is channel r % c).
func simdBNApply(x, y []float32, c, hw, lo, hi int, mean, istd, gamma, beta []float64, relu bool) {
	if lo >= hi || hw == 0 {
		return
	}
	_, _ = x[hi*hw-1], y[hi*hw-1]
	_, _, _, _ = mean[c-1], istd[c-1], gamma[c-1], beta[c-1]
	r := 0
	if relu {
		r = 1
	}
	C.gp_bn_apply(f32p(x), f32p(y), C.long(c), C.long(hw), C.long(lo), C.long(hi), f64p(mean), f64p(istd),
		f64p(gamma), f64p(beta), C.int(r))
}

// simdBNGradApply is bnGradApply's loop for rows [lo, hi).
func simdBNGradApply(x, dy, dx []float32, c, hw, lo, hi int, k1, k2, k3 []float64) {
	if lo >= hi || hw == 0 {
		return
	}
	_, _, _ = x[hi*hw-1], dy[hi*hw-1], dx[hi*hw-1]
	_, _, _ = k1[c-1], k2[c-1], k3[c-1]
	C.gp_bn_grad_apply(f32p(x), f32p(dy), f32p(dx), C.long(c), C.long(hw), C.long(lo), C.long(hi),
		f64p(k1), f64p(k2), f64p(k3))
}

// simdReLU is reluBits32: y = v where sel's bits are positive as an int32, else +0.
func simdReLU(v, y, sel []float32) {
	y, sel = y[:len(v)], sel[:len(v)]
	C.gp_relu_sel(f32p(v), f32p(y), f32p(sel), C.long(len(v)))
}

// simdLNForward is lnForward's loop for rows [lo, hi) of m elements.
func simdLNForward(x, y []float32, lo, hi, m int, gamma, beta []float64, eps float64, mean, istd []float64) {
	if lo >= hi || m == 0 {
		return
	}
	_, _, _, _, _, _ = x[hi*m-1], y[hi*m-1], gamma[m-1], beta[m-1], mean[hi-1], istd[hi-1]
	C.gp_ln_fwd(f32p(x), f32p(y), C.long(lo), C.long(hi), C.long(m), f64p(gamma), f64p(beta), C.double(eps),
		f64p(mean), f64p(istd))
}

// simdLNBackward is one block of lnBackward: rows [r0, r1), gamma and beta gradients added
// into dgamma and dbeta.
func simdLNBackward(x, dy, dx []float32, r0, r1, m int, gamma, mean, istd, dgamma, dbeta []float64) {
	if r0 >= r1 || m == 0 {
		return
	}
	_, _, _, _, _, _, _, _ = x[r1*m-1], dy[r1*m-1], dx[r1*m-1], gamma[m-1], mean[r1-1], istd[r1-1], dgamma[m-1], dbeta[m-1]
	C.gp_ln_bwd(f32p(x), f32p(dy), f32p(dx), C.long(r0), C.long(r1), C.long(m), f64p(gamma), f64p(mean),
		f64p(istd), f64p(dgamma), f64p(dbeta))
}

// simdColSums sets db[o] = Σ_r dy[r·c+o] over rows r in order (biasGrad with inner == 1).
func simdColSums(dy []float32, rows, c int, db []float32) {
	if c == 0 {
		return
	}
	_ = db[c-1]
	if rows > 0 {
		_ = dy[rows*c-1]
	}
	C.gp_col_sums(f32p(dy), C.long(rows), C.long(c), f32p(db))
}

// simdMaxPoolSearch is maxPoolSearch for float32 on planes [lo, hi); y may be nil.
func simdMaxPoolSearch(g *convGeom, x, y []float32, arg []int32, lo, hi int) {
	hw, P := g.H*g.W, g.OH*g.OW
	if lo >= hi || P == 0 {
		return
	}
	_, _ = x[hi*hw-1], arg[hi*P-1]
	if y != nil {
		_ = y[hi*P-1]
	}
	cg := cGeom(g)
	C.gp_maxpool(&cg, f32p(x), f32p(y), i32p(arg), C.long(lo), C.long(hi))
}

// simdMaxPoolScatter is maxPool's gradient scatter for float32 on planes [lo, hi): every
// arg must lie in [0, hw) (maxPoolSearch's offsets do).
func simdMaxPoolScatter(arg []int32, dy, dx []float32, lo, hi, P, hw int) {
	if lo >= hi || hw == 0 {
		return
	}
	_ = dx[hi*hw-1]
	if P > 0 {
		_, _ = arg[hi*P-1], dy[hi*P-1]
	}
	C.gp_maxpool_scatter(i32p(arg), f32p(dy), f32p(dx), C.long(lo), C.long(hi), C.long(P), C.long(hw))
}

// simdScale sets y[i] = x[i]·s, len(y) >= len(x).
func simdScale(x, y []float32, s float32) {
	y = y[:len(x)]
	C.gp_scale(f32p(x), f32p(y), C.long(len(x)), C.float(s))
}
