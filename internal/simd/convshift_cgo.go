//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "convshift_avx512.h"
#include "convshift_fwd_avx512.h"
#include "convshift_avx2.h"
*/
import "C"

import "sync/atomic"

func cShift(s *ConvShift) C.gp_shiftconv {
	return C.gp_shiftconv{C: C.int(s.C), O: C.int(s.O), kk: C.int(s.KK), P: C.long(s.P), xc: C.long(s.XC),
		xn: C.long(s.XN), yc: C.long(s.YC), yn: C.long(s.YN)}
}

// checkShift checks s's tables and the extent of x (n images) before a kernel reads them.
func checkShift(s *ConvShift, x []float32, n int) {
	_, _ = s.Off[s.KK-1], s.Mask[s.KK*((s.P+15)/16)-1]
	_ = x[(n-1)*s.XN+(s.C-1)*s.XC+s.P-1]
}

// convShiftSpanOff makes ConvShiftFwd cut the batch into per-image units at every level,
// for the tests and benchmarks that compare the two ways.
var convShiftSpanOff atomic.Bool

// convShiftSpans reports whether ConvShiftFwd's units span images for s (Note [Units across
// images] in convshift_fwd_avx512.h): at AVX-512, P above 16 where per-image units would
// use under 80% of their lanes, the tables of masks it builds within their bound. Measured
// at one thread on resnet8_s2's shapes at batch 64 (BenchmarkConvShiftSpanAB, alternating
// in one process): 1.14-1.16x on 7x7 maps (77% of the lanes) with 3x3 taps, 1.0x with
// 1x1; 0.98x on 14x14 (94%), which keeps its per-image units.
func convShiftSpans(s *ConvShift) bool {
	return Current() == AVX512 && !convShiftSpanOff.Load() && s.P > 16 && s.P*5 < (s.P+15)/16*16*4 &&
		s.KK*s.P <= C.GP5_SPAN_TAB
}

// ConvShiftUnits is how many units ConvShiftFwd cuts n images of s into at the current
// level: ceil(n·P/16) where its units span images (at AVX-512 on maps such as 7x7 and 5x5,
// where per-image units would leave many lanes idle: each unit 16 consecutive pixels of
// the batch, image after image), else n·ceil(P/16) (16 pixels of one image each, the last of an image
// partial). Callers split [0, ConvShiftUnits) across threads; the results do not depend on
// the split.
func ConvShiftUnits(s *ConvShift, n int) int {
	if convShiftSpans(s) {
		return (n*s.P + 15) / 16
	}
	return n * ((s.P + 15) / 16)
}

// ConvShiftFwd is the forward of the implicit convolution s over units [u0, u1) of the n
// images (ConvShiftUnits: 16 pixels each, of one image or, where ConvShiftUnits says so, of
// the batch's pixels image after image): y = wpᵀ·cols(x) (+ bias[o] when
// bias is not nil), wp the weights packed K×O (row r = c·KK + q, im2col's order of rows).
// Each output is Σ_r wp[r, o]·cols(x)[r, k] summed in the order of r with fused
// multiply-adds, then the bias added: the same bits at every level and for every split of
// the units. It reports false at level Off and for units outside the batch.
func ConvShiftFwd(s *ConvShift, x, wp, bias, y []float32, n, u0, u1 int) bool {
	l := Current()
	if l == Off || u0 < 0 || u1 > ConvShiftUnits(s, n) {
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
		span := C.int(0)
		if convShiftSpans(s) {
			span = 1
		}
		C.gp5_conv_shift_fwd(&cs, i32p(s.Off), u16p(s.Mask), f32p(x), f32p(wp), f32p(bias), f32p(y), C.long(n), C.long(u0), C.long(u1), span)
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

// ConvShiftPadOK reports whether ConvShiftFwdPad and ConvShiftWGradPad run for s read
// through pad: at level
// AVX512, rows of OW pixels a multiple of 16 (each unit of 16 pixels within one line), OH·OW
// = s.P, one tap offset for each of s's taps.
func ConvShiftPadOK(s *ConvShift, pad *ConvPad) bool {
	return Current() == AVX512 && pad.OW > 0 && pad.OW%16 == 0 && pad.OH*pad.OW == s.P && pad.PH >= 0 &&
		pad.PW >= 0 && len(pad.Off) == s.KK
}

// PadPlanes writes nc planes of x (OH×OW each) into xp as pad's padded planes (Size each),
// the border 0. It reports false at level Off.
func PadPlanes(pad *ConvPad, x, xp []float32, nc int) bool {
	if Current() == Off || pad.OH < 1 || pad.OW < 1 || pad.PH < 0 || pad.PW < 0 {
		return false
	}
	if nc == 0 {
		return true
	}
	_, _ = x[nc*pad.OH*pad.OW-1], xp[nc*pad.Size()-1]
	C.gp_pad_planes(f32p(x), f32p(xp), C.long(nc), C.long(pad.OH), C.long(pad.OW), C.long(pad.PH), C.long(pad.PW))
	return true
}

// ConvShiftFwdPad is ConvShiftFwd with x read from xp, its planes padded by PadPlanes (n
// images of s.C planes of pad.Size() floats): the same sums in the same order, so the same
// bits, without masking each load. It reports false, computing nothing, where
// ConvShiftPadOK does not take s and pad, for units outside the batch, or for taps that
// would read outside their padded plane; the caller then runs ConvShiftFwd.
func ConvShiftFwdPad(s *ConvShift, pad *ConvPad, xp, wp, bias, y []float32, n, u0, u1 int) bool {
	if !ConvShiftPadOK(s, pad) || u0 < 0 || u1 > n*(s.P/16) || !padTapsInside(pad) {
		return false
	}
	if u0 >= u1 {
		return true
	}
	pp := pad.Size()
	_, _, _ = xp[n*s.C*pp-1], wp[s.C*s.KK*s.O-1], y[(n-1)*s.YN+(s.O-1)*s.YC+s.P-1]
	if bias != nil {
		_ = bias[s.O-1]
	}
	cs := cShift(s)
	C.gp5_conv_shift_fwd_pad(&cs, i32p(pad.Off), C.long(pad.OW), C.long(pad.OW+2*pad.PW), C.long(pp), f32p(xp),
		f32p(wp), f32p(bias), f32p(y), C.long(u0), C.long(u1))
	return true
}

// padTapsInside reports whether every tap of pad reads inside its padded plane: the last
// unit of a plane reads 16 floats from Off[q] + (OH-1)·(OW + 2·PW) + OW - 16.
func padTapsInside(pad *ConvPad) bool {
	pp, lw := pad.Size(), pad.OW+2*pad.PW
	for _, o := range pad.Off {
		if o < 0 || int(o)+(pad.OH-1)*lw+pad.OW > pp {
			return false
		}
	}
	return true
}

// ConvShiftWGradPad is ConvShiftWGrad with x read from xp, its planes padded by PadPlanes
// (n images of s.C planes of pad.Size() floats): the same sums in the same order, so the
// same bits, without masking each load. It reports false, computing nothing, where
// ConvShiftPadOK does not take s and pad, and for channels outside [0, O); the caller then
// runs ConvShiftWGrad. Every tap's reads must stay inside its padded plane.
func ConvShiftWGradPad(s *ConvShift, pad *ConvPad, xp, dy, dw []float32, n, oa, ob int) bool {
	if !ConvShiftPadOK(s, pad) || oa < 0 || ob > s.O || !padTapsInside(pad) {
		return false
	}
	if oa >= ob || n == 0 {
		return true
	}
	pp := pad.Size()
	_, _, _ = xp[n*s.C*pp-1], dy[n*s.O*s.P-1], dw[s.O*s.C*s.KK-1]
	wp := pad.OW + 2*pad.PW
	cs := cShift(s)
	C.gp5_conv_shift_wgrad_pad(&cs, i32p(pad.Off), C.long(pad.OW), C.long(wp), C.long(pp), f32p(xp), f32p(dy),
		f32p(dw), C.int(n), C.int(oa), C.int(ob))
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
	// All four phases of stride 2 (3x3 with padding 1) at AVX-512 by permutes: 1.4-1.7x
	// the generic copy on resnet8_s2's layers; one phase (1x1) measured 0.8-0.9x.
	if s == 2 && used&15 == 15 && Current() == AVX512 {
		C.gp5_phase_split2(f32p(x), f32p(xp), C.long(nc), C.long(h), C.long(w), C.long(oh), C.long(ow), C.ulonglong(used))
		return true
	}
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
	// All four phases of stride 2 at AVX-512 by permutes: 1.64x the generic copy on 14x14
	// maps and 1.33x on 7x7 (resnet8_s2's 3x3 layers at batch 64, BenchmarkPhaseMergeAB);
	// one phase (1x1) measured 1.08x and 0.87x and keeps the copy.
	if s == 2 && used&15 == 15 && Current() == AVX512 {
		C.gp5_phase_merge2(f32p(xp), f32p(dx), C.long(nc), C.long(h), C.long(w), C.long(oh), C.long(ow))
		return true
	}
	C.gp_phase_merge(f32p(xp), f32p(dx), C.long(nc), C.long(h), C.long(w), C.long(oh), C.long(ow), C.long(s), C.ulonglong(used))
	return true
}
