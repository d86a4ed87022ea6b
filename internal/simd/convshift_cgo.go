//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "convshift_avx512.h"
#include "convshift_avx2.h"
*/
import "C"

// ConvShiftFwd is the forward of an implicit convolution over units [u0, u1) of the batch
// (unit u: image u/ceil(P/16), its pixels from 16·(u%ceil(P/16)), at most 16 of them):
// y (N×O×P) = wpᵀ·cols(x) (+ bias[o] when bias is not nil), for a stride-1 convolution
// whose output has its input's size P = H·W, x N×C×P, wp the weights packed K×O (row r =
// c·kk + q, im2col's order of rows), shift and mask the tables of nn/ops's shiftTable
// (Im2colShift's). Each output is Σ_r wp[r, o]·x[c, k + shift[q]] summed in the order of r
// with fused multiply-adds, then the bias added: the same bits at every level.
func ConvShiftFwd(x, wp, bias, y []float32, n, c, o, kk, p int, shift []int32, mask []uint16, u0, u1 int) bool {
	l := Current()
	if l == Off {
		return false
	}
	nch := (p + 15) / 16
	if u0 >= u1 || p == 0 {
		return true
	}
	// The kernel reads and writes without bounds checks: check the extents.
	_, _, _ = x[n*c*p-1], wp[c*kk*o-1], y[n*o*p-1]
	_, _ = shift[kk-1], mask[kk*nch-1]
	if bias != nil {
		_ = bias[o-1]
	}
	if u0 < 0 || u1 > n*nch {
		return false
	}
	if l == AVX512 {
		C.gp5_conv_shift_fwd(f32p(x), f32p(wp), f32p(bias), f32p(y), C.int(c), C.int(o), C.int(kk), C.long(p),
			i32p(shift), u16p(mask), C.long(u0), C.long(u1))
	} else {
		C.gp2_conv_shift_fwd(f32p(x), f32p(wp), f32p(bias), f32p(y), C.int(c), C.int(o), C.int(kk), C.long(p),
			i32p(shift), u16p(mask), C.long(u0), C.long(u1))
	}
	return true
}

// ConvShiftWGrad is the filter gradient of ConvShiftFwd's convolution for output channels
// [oa, ob): rows oa..ob-1 of dw (O×K, K = C·kk) = dy·cols(x)ᵀ over the n images, dy N×O×P,
// overwritten. Each sum runs over the pixels in 16 lanes (lane t: pixels k ≡ t mod 16 of
// every image, in order), then adds the lanes in a fixed tree: the same bits at every level.
func ConvShiftWGrad(x, dy, dw []float32, n, c, o, kk, p int, shift []int32, mask []uint16, oa, ob int) bool {
	l := Current()
	if l == Off {
		return false
	}
	if oa >= ob {
		return true
	}
	nch := (p + 15) / 16
	_, _, _ = x[n*c*p-1], dy[n*o*p-1], dw[o*c*kk-1]
	_, _ = shift[kk-1], mask[kk*nch-1]
	if oa < 0 || ob > o {
		return false
	}
	if l == AVX512 {
		C.gp5_conv_shift_wgrad(f32p(x), f32p(dy), f32p(dw), C.int(n), C.int(c), C.int(o), C.int(kk), C.long(p),
			i32p(shift), u16p(mask), C.int(oa), C.int(ob))
	} else {
		C.gp2_conv_shift_wgrad(f32p(x), f32p(dy), f32p(dw), C.int(n), C.int(c), C.int(o), C.int(kk), C.long(p),
			i32p(shift), u16p(mask), C.int(oa), C.int(ob))
	}
	return true
}
