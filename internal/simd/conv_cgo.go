//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "conv_avx512.h"
#include "norm_avx512.h"
#include "conv_avx2.h"
#include "norm_avx2.h"
*/
import "C"

import "unsafe"

func cGeom(g *ConvGeom) C.gp_geom {
	return C.gp_geom{C: C.int(g.C), H: C.int(g.H), W: C.int(g.W), KH: C.int(g.KH), KW: C.int(g.KW),
		SH: C.int(g.SH), SW: C.int(g.SW), PH: C.int(g.PH), PW: C.int(g.PW), DH: C.int(g.DH), DW: C.int(g.DW),
		OH: C.int(g.OH), OW: C.int(g.OW)}
}

func u16p(s []uint16) *C.ushort {
	if len(s) == 0 {
		return nil
	}
	return (*C.ushort)(unsafe.Pointer(unsafe.SliceData(s)))
}

// GELUFwd is nn/ops's gelu32Fwd (y[i] = x[i]·Φ(x[i]), len(y) >= len(x)), within one
// float32 ulp of it (the kernels fuse the polynomials' multiply-adds).
func GELUFwd(x, y []float32) bool {
	l := Current()
	if l == Off {
		return false
	}
	y = y[:len(x)]
	if l == AVX512 {
		C.gp5_gelu_fwd(f32p(x), f32p(y), C.long(len(x)))
	} else {
		C.gp2_gelu_fwd(f32p(x), f32p(y), C.long(len(x)))
	}
	return true
}

// GELUBwd is nn/ops's gelu32Bwd (dx[i] = dy[i]·GELU'(x[i])), within one float32 ulp.
func GELUBwd(x, dy, dx []float32) bool {
	l := Current()
	if l == Off {
		return false
	}
	dy, dx = dy[:len(x)], dx[:len(x)]
	if l == AVX512 {
		C.gp5_gelu_bwd(f32p(x), f32p(dy), f32p(dx), C.long(len(x)))
	} else {
		C.gp2_gelu_bwd(f32p(x), f32p(dy), f32p(dx), C.long(len(x)))
	}
	return true
}

// Im2col is nn/ops's im2colRange for float32: rows of channels [lo, hi) of col (ld apart)
// from image x; bit-identical.
func Im2col(g *ConvGeom, x, col []float32, ld, lo, hi int) bool {
	l := Current()
	if l == Off {
		return false
	}
	if lo >= hi || g.OH*g.OW == 0 {
		return true
	}
	cg := cGeom(g)
	_ = col[(hi*g.KH*g.KW-1)*ld+g.OH*g.OW-1]
	_ = x[g.C*g.H*g.W-1]
	if l == AVX512 {
		C.gp5_im2col(&cg, f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi))
	} else {
		C.gp2_im2col(&cg, f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi))
	}
	return true
}

// Col2im is nn/ops's col2imRange for float32: channels [lo, hi) of dx overwritten with the
// sums of col's rows, added in the Go loop's order; bit-identical.
func Col2im(g *ConvGeom, col, dx []float32, ld, lo, hi int) bool {
	l := Current()
	if l == Off {
		return false
	}
	if lo >= hi {
		return true
	}
	cg := cGeom(g)
	_ = dx[hi*g.H*g.W-1]
	if g.OH*g.OW > 0 {
		_ = col[(hi*g.KH*g.KW-1)*ld+g.OH*g.OW-1]
	}
	if l == AVX512 {
		C.gp5_col2im(&cg, f32p(col), f32p(dx), C.long(ld), C.int(lo), C.int(hi))
	} else {
		C.gp2_col2im(&cg, f32p(col), f32p(dx), C.long(ld), C.int(lo), C.int(hi))
	}
	return true
}

// Im2colGather is nn/ops's im2colGather for float32 through its index tables (gat: kk·P
// offsets into a plane; padPos/padOff: the padded positions of each kernel offset).
func Im2colGather(g *ConvGeom, gat, padPos, padOff []int32, x, col []float32, ld, lo, hi int) bool {
	l := Current()
	if l == Off {
		return false
	}
	P := g.OH * g.OW
	if lo >= hi || P == 0 {
		return true
	}
	_ = col[(hi*g.KH*g.KW-1)*ld+P-1]
	_ = x[hi*g.H*g.W-1]
	_ = gat[g.KH*g.KW*P-1]
	_ = padOff[g.KH*g.KW]
	if l == AVX512 {
		C.gp5_im2col_gather(f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi), C.int(g.KH*g.KW), C.int(P),
			C.long(g.H*g.W), i32p(gat), i32p(padPos), i32p(padOff))
	} else {
		C.gp2_im2col_gather(f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi), C.int(g.KH*g.KW), C.int(P),
			C.long(g.H*g.W), i32p(gat), i32p(padPos), i32p(padOff))
	}
	return true
}

// Im2colShift is nn/ops's im2colRange for float32 when convShiftable(g) (stride 1, OW ==
// W), through its shift table (one plane offset per kernel offset) and 16-lane masks
// (ceil(P/16) per kernel offset; bit i of a mask keeps pixel 16k+i).
func Im2colShift(g *ConvGeom, shift []int32, mask []uint16, x, col []float32, ld, lo, hi int) bool {
	l := Current()
	if l == Off {
		return false
	}
	P := g.OH * g.OW
	if lo >= hi || P == 0 {
		return true
	}
	kk := g.KH * g.KW
	_ = col[(hi*kk-1)*ld+P-1]
	_ = x[hi*g.H*g.W-1]
	_, _ = shift[kk-1], mask[kk*((P+15)/16)-1]
	if l == AVX512 {
		C.gp5_im2col_shift(f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi), C.int(kk), C.long(P),
			C.long(g.H*g.W), i32p(shift), u16p(mask))
	} else {
		C.gp2_im2col_shift(f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi), C.int(kk), C.long(P),
			C.long(g.H*g.W), i32p(shift), u16p(mask))
	}
	return true
}

// Col2imShift is nn/ops's col2imRange for Im2colShift's geometries and tables: planes
// [lo, hi) of dx overwritten, rows added in col2imRange's order; bit-identical.
func Col2imShift(g *ConvGeom, shift []int32, mask []uint16, col, dx []float32, ld, lo, hi int) bool {
	l := Current()
	if l == Off {
		return false
	}
	P := g.OH * g.OW
	if lo >= hi {
		return true
	}
	_ = dx[hi*g.H*g.W-1]
	if P == 0 {
		clear(dx[lo*g.H*g.W : hi*g.H*g.W])
		return true
	}
	kk := g.KH * g.KW
	_ = col[(hi*kk-1)*ld+P-1]
	_, _ = shift[kk-1], mask[kk*((P+15)/16)-1]
	if l == AVX512 {
		C.gp5_col2im_shift(f32p(col), f32p(dx), C.long(ld), C.int(lo), C.int(hi), C.int(kk), C.long(P),
			C.long(g.H*g.W), i32p(shift), u16p(mask))
	} else {
		C.gp2_col2im_shift(f32p(col), f32p(dx), C.long(ld), C.int(lo), C.int(hi), C.int(kk), C.long(P),
			C.long(g.H*g.W), i32p(shift), u16p(mask))
	}
	return true
}

// Col2imIndexedAdd is nn/ops's col2imIndexedAdd for float32: rows of P columns of col (ld
// apart) added into dx through idx (-1 marks padding; every other entry must lie in dx).
func Col2imIndexedAdd(idx []int32, P int, col, dx []float32, ld int) bool {
	l := Current()
	if l == Off {
		return false
	}
	if len(idx) == 0 || P == 0 {
		return true
	}
	rows := len(idx) / P
	_ = col[(rows-1)*ld+P-1]
	if l == AVX512 {
		C.gp5_col2im_indexed_add(i32p(idx), C.long(rows), C.int(P), f32p(col), f32p(dx), C.long(len(dx)), C.long(ld))
	} else {
		C.gp2_col2im_indexed_add(i32p(idx), C.long(rows), C.int(P), f32p(col), f32p(dx), C.long(len(dx)), C.long(ld))
	}
	return true
}

// ColSums sets db[o] = Σ_r dy[r·c+o] over rows r in order (nn/ops's biasGrad with inner ==
// 1); bit-identical.
func ColSums(dy []float32, rows, c int, db []float32) bool {
	l := Current()
	if l == Off {
		return false
	}
	if c == 0 {
		return true
	}
	_ = db[c-1]
	if rows > 0 {
		_ = dy[rows*c-1]
	}
	if l == AVX512 {
		C.gp5_col_sums(f32p(dy), C.long(rows), C.long(c), f32p(db))
	} else {
		C.gp2_col_sums(f32p(dy), C.long(rows), C.long(c), f32p(db))
	}
	return true
}

// MaxPoolSearch is nn/ops's maxPoolSearch for float32 on planes [lo, hi): each window's
// first maximum (or first NaN) offset into arg, its value into y unless y is nil.
func MaxPoolSearch(g *ConvGeom, x, y []float32, arg []int32, lo, hi int) bool {
	l := Current()
	if l == Off {
		return false
	}
	hw, P := g.H*g.W, g.OH*g.OW
	if lo >= hi || P == 0 {
		return true
	}
	_, _ = x[hi*hw-1], arg[hi*P-1]
	if y != nil {
		_ = y[hi*P-1]
	}
	cg := cGeom(g)
	if l == AVX512 {
		C.gp5_maxpool(&cg, f32p(x), f32p(y), i32p(arg), C.long(lo), C.long(hi))
	} else {
		C.gp2_maxpool(&cg, f32p(x), f32p(y), i32p(arg), C.long(lo), C.long(hi))
	}
	return true
}

// MaxPoolScatter is max pooling's gradient for float32 on planes [lo, hi): dx cleared,
// then dy added at each window's arg; every arg must lie in [0, hw).
func MaxPoolScatter(arg []int32, dy, dx []float32, lo, hi, P, hw int) bool {
	l := Current()
	if l == Off {
		return false
	}
	if lo >= hi || hw == 0 {
		return true
	}
	_ = dx[hi*hw-1]
	if P > 0 {
		_, _ = arg[hi*P-1], dy[hi*P-1]
	}
	if l == AVX512 {
		C.gp5_maxpool_scatter(i32p(arg), f32p(dy), f32p(dx), C.long(lo), C.long(hi), C.long(P), C.long(hw))
	} else {
		C.gp2_maxpool_scatter(i32p(arg), f32p(dy), f32p(dx), C.long(lo), C.long(hi), C.long(P), C.long(hw))
	}
	return true
}

// BNSums is nn/ops's bnSums loop for channels [lo, hi) of x [n, c, hw]: per channel the sum
// and the sum of squares in float64, accumulated in eight lanes per plane (a fixed order,
// independent of the level and of threads; the squares fused).
func BNSums(x []float32, n, c, hw, lo, hi int, sum, sq []float64) bool {
	l := Current()
	if l == Off {
		return false
	}
	if lo >= hi {
		return true
	}
	_, _ = sum[hi-1], sq[hi-1]
	if hw > 0 {
		_ = x[n*c*hw-1]
	}
	if l == AVX512 {
		C.gp5_bn_sums(f32p(x), C.long(n), C.long(c), C.long(hw), C.long(lo), C.long(hi), f64p(sum), f64p(sq))
	} else {
		C.gp2_bn_sums(f32p(x), C.long(n), C.long(c), C.long(hw), C.long(lo), C.long(hi), f64p(sum), f64p(sq))
	}
	return true
}

// BNGradSums is nn/ops's bnGradSums loop for channels [lo, hi): Σ dy and Σ dy·(x - mean).
// With sel (nil or as long as x), dy is read as ReLU's gradient would leave it: dy where
// sel's bits are positive as an int32, else +0 (ReLUSel's mask), the same bits as masking
// dy first.
func BNGradSums(x, dy, sel []float32, n, c, hw, lo, hi int, mean, sdy, sdyx []float64) bool {
	l := Current()
	if l == Off {
		return false
	}
	if lo >= hi {
		return true
	}
	_, _, _ = mean[hi-1], sdy[hi-1], sdyx[hi-1]
	if hw > 0 {
		_, _ = x[n*c*hw-1], dy[n*c*hw-1]
		if sel != nil {
			_ = sel[n*c*hw-1]
		}
	}
	if l == AVX512 {
		C.gp5_bn_grad_sums(f32p(x), f32p(dy), f32p(sel), C.long(n), C.long(c), C.long(hw), C.long(lo), C.long(hi),
			f64p(mean), f64p(sdy), f64p(sdyx))
	} else {
		C.gp2_bn_grad_sums(f32p(x), f32p(dy), f32p(sel), C.long(n), C.long(c), C.long(hw), C.long(lo), C.long(hi),
			f64p(mean), f64p(sdy), f64p(sdyx))
	}
	return true
}

// BNApply is nn/ops's bnApply loop for rows [lo, hi) (row r is channel r % c): y = x·a + b
// in float32 with a, b from the channel's statistics, then ReLU when relu; bit-identical.
func BNApply(x, y []float32, c, hw, lo, hi int, mean, istd, gamma, beta []float64, relu bool) bool {
	l := Current()
	if l == Off {
		return false
	}
	if lo >= hi || hw == 0 {
		return true
	}
	_, _ = x[hi*hw-1], y[hi*hw-1]
	_, _, _, _ = mean[c-1], istd[c-1], gamma[c-1], beta[c-1]
	if l == AVX512 {
		C.gp5_bn_apply(f32p(x), f32p(y), C.long(c), C.long(hw), C.long(lo), C.long(hi), f64p(mean), f64p(istd),
			f64p(gamma), f64p(beta), cbool(relu))
	} else {
		C.gp2_bn_apply(f32p(x), f32p(y), C.long(c), C.long(hw), C.long(lo), C.long(hi), f64p(mean), f64p(istd),
			f64p(gamma), f64p(beta), cbool(relu))
	}
	return true
}

// BNGradApply is nn/ops's bnGradApply loop for rows [lo, hi): dx = k1·dy + k2·x + k3 in
// float32 per channel; bit-identical. With sel (nil or as long as x), dy is masked as in
// BNGradSums.
func BNGradApply(x, dy, sel, dx []float32, c, hw, lo, hi int, k1, k2, k3 []float64) bool {
	l := Current()
	if l == Off {
		return false
	}
	if lo >= hi || hw == 0 {
		return true
	}
	_, _, _ = x[hi*hw-1], dy[hi*hw-1], dx[hi*hw-1]
	if sel != nil {
		_ = sel[hi*hw-1]
	}
	_, _, _ = k1[c-1], k2[c-1], k3[c-1]
	if l == AVX512 {
		C.gp5_bn_grad_apply(f32p(x), f32p(dy), f32p(sel), f32p(dx), C.long(c), C.long(hw), C.long(lo), C.long(hi),
			f64p(k1), f64p(k2), f64p(k3))
	} else {
		C.gp2_bn_grad_apply(f32p(x), f32p(dy), f32p(sel), f32p(dx), C.long(c), C.long(hw), C.long(lo), C.long(hi),
			f64p(k1), f64p(k2), f64p(k3))
	}
	return true
}

// ReLUSel is nn/ops's reluBits32: y[i] = v[i] where sel[i]'s bits are positive as an int32,
// else +0; bit-identical.
func ReLUSel(v, y, sel []float32) bool {
	l := Current()
	if l == Off {
		return false
	}
	y, sel = y[:len(v)], sel[:len(v)]
	if l == AVX512 {
		C.gp5_relu_sel(f32p(v), f32p(y), f32p(sel), C.long(len(v)))
	} else {
		C.gp2_relu_sel(f32p(v), f32p(y), f32p(sel), C.long(len(v)))
	}
	return true
}

// ScaleTo sets y[i] = x[i]·s (len(y) >= len(x); dropout's kept runs); bit-identical.
func ScaleTo(x, y []float32, s float32) bool {
	l := Current()
	if l == Off {
		return false
	}
	y = y[:len(x)]
	if l == AVX512 {
		C.gp5_scale(f32p(x), f32p(y), C.long(len(x)), C.float(s))
	} else {
		C.gp2_scale(f32p(x), f32p(y), C.long(len(x)), C.float(s))
	}
	return true
}

// LNForward is nn/ops's lnForward loop for rows [lo, hi) of m elements: mean and
// 1/sqrt(var+eps) per row in float64 (eight-lane sums), y = (x-mean)·istd·gamma + beta.
func LNForward(x, y []float32, lo, hi, m int, gamma, beta []float64, eps float64, mean, istd []float64) bool {
	l := Current()
	if l == Off {
		return false
	}
	if lo >= hi || m == 0 {
		return true
	}
	_, _, _, _, _, _ = x[hi*m-1], y[hi*m-1], gamma[m-1], beta[m-1], mean[hi-1], istd[hi-1]
	if l == AVX512 {
		C.gp5_ln_fwd(f32p(x), f32p(y), C.long(lo), C.long(hi), C.long(m), f64p(gamma), f64p(beta), C.double(eps),
			f64p(mean), f64p(istd))
	} else {
		C.gp2_ln_fwd(f32p(x), f32p(y), C.long(lo), C.long(hi), C.long(m), f64p(gamma), f64p(beta), C.double(eps),
			f64p(mean), f64p(istd))
	}
	return true
}

// LNBackward is one block of nn/ops's lnBackward: rows [r0, r1) of m elements, their gamma
// and beta gradients added into dgamma and dbeta, dx written.
func LNBackward(x, dy, dx []float32, r0, r1, m int, gamma, mean, istd, dgamma, dbeta []float64) bool {
	l := Current()
	if l == Off {
		return false
	}
	if r0 >= r1 || m == 0 {
		return true
	}
	_, _, _, _, _, _, _, _ = x[r1*m-1], dy[r1*m-1], dx[r1*m-1], gamma[m-1], mean[r1-1], istd[r1-1], dgamma[m-1], dbeta[m-1]
	if l == AVX512 {
		C.gp5_ln_bwd(f32p(x), f32p(dy), f32p(dx), C.long(r0), C.long(r1), C.long(m), f64p(gamma), f64p(mean),
			f64p(istd), f64p(dgamma), f64p(dbeta))
	} else {
		C.gp2_ln_bwd(f32p(x), f32p(dy), f32p(dx), C.long(r0), C.long(r1), C.long(m), f64p(gamma), f64p(mean),
			f64p(istd), f64p(dgamma), f64p(dbeta))
	}
	return true
}
