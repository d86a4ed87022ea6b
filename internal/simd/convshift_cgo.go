//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "convshift_avx512.h"
#include "convshift_avx2.h"
*/
import "C"

func cShift(s *ConvShift) C.gp_shiftconv {
	return C.gp_shiftconv{C: C.int(s.C), O: C.int(s.O), kk: C.int(s.KK), P: C.long(s.P), xc: C.long(s.XC),
		xn: C.long(s.XN), yc: C.long(s.YC), yn: C.long(s.YN)}
}

// checkShift checks s's tables and the extent of x (n images) before a kernel reads them.
func checkShift(s *ConvShift, x []float32, n int) {
	_, _ = s.Off[s.KK-1], s.Mask[s.KK*((s.P+15)/16)-1]
	_ = x[(n-1)*s.XN+(s.C-1)*s.XC+s.P-1]
}

// ConvShiftFwd is the forward of the implicit convolution s over units [u0, u1) of the n
// images (unit u: image u/ceil(P/16), its pixels from 16·(u%ceil(P/16)), at most 16 of
// them): y = wpᵀ·cols(x) (+ bias[o] when bias is not nil), wp the weights packed K×O (row
// r = c·KK + q, im2col's order of rows). Each output is Σ_r wp[r, o]·cols(x)[r, k] summed
// in the order of r with fused multiply-adds, then the bias added: the same bits at every
// level. It reports false at level Off and for units outside the batch.
func ConvShiftFwd(s *ConvShift, x, wp, bias, y []float32, n, u0, u1 int) bool {
	l := Current()
	nch := (s.P + 15) / 16
	if l == Off || u0 < 0 || u1 > n*nch {
		return false
	}
	if u0 >= u1 {
		return true
	}
	// The kernel reads and writes without bounds checks: check the extents.
	checkShift(s, x, n)
	_, _ = wp[s.C*s.KK*s.O-1], y[(n-1)*s.YN+(s.O-1)*s.YC+s.P-1]
	if bias != nil {
		_ = bias[s.O-1]
	}
	cs := cShift(s)
	if l == AVX512 {
		C.gp5_conv_shift_fwd(&cs, i32p(s.Off), u16p(s.Mask), f32p(x), f32p(wp), f32p(bias), f32p(y), C.long(u0), C.long(u1))
	} else {
		C.gp2_conv_shift_fwd(&cs, i32p(s.Off), u16p(s.Mask), f32p(x), f32p(wp), f32p(bias), f32p(y), C.long(u0), C.long(u1))
	}
	return true
}

// ConvShiftWGrad is the filter gradient of the implicit convolution s for output channels
// [oa, ob): rows oa..ob-1 of dw (O×K, K = C·KK) = dy·cols(x)ᵀ over the n images, dy N×O×P
// (dense), overwritten. Each sum runs over the pixels in 16 lanes (lane t: pixels k ≡ t mod
// 16 of every image, in order), then adds the lanes in a fixed tree: the same bits at every
// level. It reports false at level Off and for channels outside [0, O).
func ConvShiftWGrad(s *ConvShift, x, dy, dw []float32, n, oa, ob int) bool {
	l := Current()
	if l == Off || oa < 0 || ob > s.O {
		return false
	}
	if oa >= ob || n == 0 {
		return true
	}
	checkShift(s, x, n)
	_, _ = dy[n*s.O*s.P-1], dw[s.O*s.C*s.KK-1]
	cs := cShift(s)
	if l == AVX512 {
		C.gp5_conv_shift_wgrad(&cs, i32p(s.Off), u16p(s.Mask), f32p(x), f32p(dy), f32p(dw), C.int(n), C.int(oa), C.int(ob))
	} else {
		C.gp2_conv_shift_wgrad(&cs, i32p(s.Off), u16p(s.Mask), f32p(x), f32p(dy), f32p(dw), C.int(n), C.int(oa), C.int(ob))
	}
	return true
}

// PhaseSplit writes the phase planes of stride s of nc planes of x (h×w each) into xp (s²
// planes of oh×ow for each): plane a·s + b holds x[s·i + a, s·j + b], 0 past x's edge,
// for the phases whose bit is set in used (the others are left as they are). It reports
// false at level Off.
func PhaseSplit(x, xp []float32, nc, h, w, oh, ow, s int, used uint64) bool {
	if Current() == Off || s < 1 || s > 8 {
		return false
	}
	if nc == 0 {
		return true
	}
	_, _ = x[nc*h*w-1], xp[nc*s*s*oh*ow-1]
	C.gp_phase_split(f32p(x), f32p(xp), C.long(nc), C.long(h), C.long(w), C.long(oh), C.long(ow), C.long(s), C.ulonglong(used))
	return true
}

// PhaseMerge is PhaseSplit's inverse: nc planes of dx (h×w) from the phase planes xp, the
// pixels of phases not in used and past the planes 0. It reports false at level Off.
func PhaseMerge(xp, dx []float32, nc, h, w, oh, ow, s int, used uint64) bool {
	if Current() == Off || s < 1 || s > 8 {
		return false
	}
	if nc == 0 {
		return true
	}
	_, _ = dx[nc*h*w-1], xp[nc*s*s*oh*ow-1]
	C.gp_phase_merge(f32p(xp), f32p(dx), C.long(nc), C.long(h), C.long(w), C.long(oh), C.long(ow), C.long(s), C.ulonglong(used))
	return true
}
