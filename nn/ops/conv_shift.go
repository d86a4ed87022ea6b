package ops

import (
	"math"
	"sync/atomic"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// Note [Implicit convolution]
//
// Float32 convolutions of small feature maps (the Fashion-MNIST demo's resnet8_s2: 14x14,
// 7x7, 4x4) run their forward, data gradient and filter gradient as implicit GEMMs
// (internal/simd's ConvShiftFwd and ConvShiftWGrad): the kernels read each row of the
// im2col matrix straight from the input, a plane read at the kernel offset's shift with the
// padding masked off, instead of materialising the matrix. im2col wrote, and the GEMM read
// back, nine times the image per layer; that traffic, the copies between NCHW and the
// batched path's layout, col2im's scatter and OpenBLAS's packing of skinny operands cost
// more than the multiply-adds.
//
// At stride 1 the output must have the input's size: the planes are x's channels, and
// output pixel k of kernel offset (i, j) reads pixel k + (i·dh - ph)·W + j·dw - pw of its
// plane. At stride s, x is first rearranged into s² phase planes per channel, plane (a, b)
// holding x[s·h + a, s·w + b] for the output's h < Ho, w < Wo (0 past x's edge), and
// kernel offset (i, j), with i·dh - ph = s·di + a and j·dw - pw = s·dj + b, reads plane (a,
// b) at di·Wo + dj: a stride-1 read of a plane the output's size. That needs di, dj <= 0
// (the plane holds no rows or columns past the output's), which 3x3 with padding 1 and 1x1
// without padding at stride 2 satisfy.
//
// The data gradient is, for each phase (a, b) (one at stride 1), a forward over dy: dx's
// phase plane at pixel k sums w[o, c, i, j]·dy[o, k - (di·Wo + dj)] over the kernel
// offsets of that phase, masked where k - (di, dj) leaves dy; at stride s the phase planes
// are then put back in place. No col2im scatter.
//
// At stride 1 with lines of a multiple of 16 pixels (resnet18's 16x16 maps on 64x64
// images), every 16 output pixels lie on one line, so the kernels at AVX-512 read zero-padded
// copies of the planes (x for the forward and filter gradient, made once and shared; dy for
// the data gradient) with plain loads: each masked load took a vector ALU micro-op beside the
// FMAs. The same products in the same order, so the same bits. Measured on resnet18's
// 64-channel 16x16 layer at batch 16 (forward, data and filter gradient, padding included)
// 1.11x, its training step 1.03x (BenchmarkShiftPadAB).
//
// The sums are the same products in another order than im2col and OpenBLAS's: each output
// of the forward and the data gradient sums its C·kh·kw products in the order of im2col's
// rows with fused multiply-adds, each filter gradient sums the batch's pixels in 16 lanes
// and then the lanes. The results differ from the GEMM path's by float32 rounding (the tests
// bound both against float64 and PyTorch as they bound the GEMM path), are the same bits at
// every SIMD level and thread count. It is taken at AVX-512 only (convImplicitLevel): below
// that, and at level off, convolutions run through the GEMM path.

// When the implicit convolution pays, measured per layer (forward, data and filter
// gradient) at one thread against the GEMM path, 3x3 with padding 1, on a 2-core Xeon with
// AVX-512 and OpenBLAS's SkylakeX kernels: 1.39x at 16 channels 14x14 (batch 64), 1.09x at
// 32 channels 7x7, 1.21x at 64 channels 4x4, 1.19x at 64 channels 32x32 and 1.01x at 16x16
// (batch 16); 0.94x at 128 channels 8x8, 0.51x at 256 channels 4x4 and 0.11x at 512
// channels 2x2. Its kernels read the packed weights a few output channels at a time for
// every 16 pixels, which pays while they stay in the cache, and waste lanes below 16
// pixels, where the batched GEMM path gathers the batch instead.
const (
	convImplicitWeights = 256 << 10 // bytes of float32 weights up to which it is taken
	convImplicitPixels  = 16        // the fewest output pixels at which it is taken
	// The largest stride at which it is taken: swin_t's 4x4 stride-4 patch embedding (16
	// phase planes, 3 to 96 channels at 224x224, batch 8) measured 0.72x.
	convImplicitStride = 2
	// The lowest SIMD level at which it is taken. Its AVX2 kernels, on the same Xeon with
	// OpenBLAS's Haswell kernels (GP_SIMD=avx2 OPENBLAS_CORETYPE=Haswell), measured 0.54-0.95x
	// the GEMM path on each of resnet8_s2's convolutions and 0.79x on its training step
	// (BenchmarkImplicitConvAB, BenchmarkImplicitConvLayersAB): eight lanes leave too few
	// pixels per weight load. The AVX2 kernels stay, on purpose: the tests run them against
	// the GEMM path and the benchmarks measure them (implicitAnyLevel), so that an AVX2
	// machine where they pay can be found and given them.
	convImplicitLevel = simd.AVX512
)

// implicitAnyLevel takes the implicit convolution below convImplicitLevel, for the tests of
// its AVX2 kernels and the benchmarks that measure them.
var implicitAnyLevel atomic.Bool

// implicitOff turns the implicit convolution off, for the tests that compare it with the
// GEMM path.
var implicitOff atomic.Bool

// shiftPadOff makes the implicit convolution mask its loads where it would read padded
// planes, for the benchmarks that compare the two.
var shiftPadOff atomic.Bool

// implicitWide takes the implicit convolution past the weight and pixel bounds above, for
// the benchmarks that measure where it pays.
var implicitWide atomic.Bool

// convImplicit reports whether g's convolution runs as an implicit GEMM for float32 (Note
// [Implicit convolution]): the C kernels, one group, equal strides, at stride 1 the output
// the input's size and at stride 2 every kernel offset in its phase plane, not a 1x1
// convolution without padding at stride 1 (whose GEMM reads the image as it is), at AVX-512,
// and within the bounds above.
func convImplicit(g *convGeom) bool {
	if !simdOK() || implicitOff.Load() || (simd.Current() < convImplicitLevel && !implicitAnyLevel.Load()) || g.Groups != 1 || g.directCols || g.SH != g.SW ||
		(!implicitWide.Load() && (g.OH*g.OW < convImplicitPixels || g.Out*g.colRows()*4 > convImplicitWeights)) ||
		int64(g.C)*int64(g.H)*int64(g.W)*int64(g.SH*g.SH) > math.MaxInt32/4 {
		return false
	}
	if g.SH == 1 {
		return g.OH == g.H && g.OW == g.W
	}
	if g.SH > convImplicitStride {
		return false
	}
	dh, _ := phaseOf((g.KH-1)*g.DH-g.PH, g.SH)
	dw, _ := phaseOf((g.KW-1)*g.DW-g.PW, g.SW)
	return dh <= 0 && dw <= 0
}

// phaseOf splits an input offset v (from s·output) into s·d + a with 0 <= a < s.
func phaseOf(v, s int) (d, a int) {
	d = v / s
	if v%s < 0 {
		d--
	}
	return d, v - s*d
}

// shiftPlan is an implicit convolution's tables for one geometry: the forward's (which the
// filter gradient shares) and, for each phase with kernel offsets, the data gradient's.
type shiftPlan struct {
	g    convGeom
	fwd  simd.ConvShift
	bwd  []shiftPhase
	used []bool // by phase plane: whether a kernel offset reads it
	// At stride 1 with lines of a multiple of 16 pixels, the kernels read zero-padded planes
	// (simd.PadPlanes) with plain loads instead of masking every load: padF for the forward
	// and the filter gradient (x's planes), padB for the data gradient (dy's); nil otherwise.
	padF, padB *simd.ConvPad
}

// shiftPhase is the data gradient of one phase plane: a forward over dy with the kernel
// offsets taps (q = i·kw + j) of that phase.
type shiftPhase struct {
	ph   int // plane a·s + b
	taps []int
	cs   simd.ConvShift
}

// usedBits is used as a bit set (bit p: phase plane p).
func (pl *shiftPlan) usedBits() uint64 {
	var b uint64
	for p, u := range pl.used {
		if u {
			b |= 1 << p
		}
	}
	return b
}

// tapMask sets bit k%16 of m[k/16] for the pixels k = (h, w) of an oh×ow plane whose
// (h+dh, w+dw) lies in it.
func tapMask(m []uint16, oh, ow, dh, dw int) {
	for h := 0; h < oh; h++ {
		for w := 0; w < ow; w++ {
			if h+dh >= 0 && h+dh < oh && w+dw >= 0 && w+dw < ow {
				k := h*ow + w
				m[k/16] |= 1 << (k % 16)
			}
		}
	}
}

// shiftPlanOf returns g's plan, built on first use (call it before goroutines share sc).
func (sc *convScratch) shiftPlanOf(g *convGeom) *shiftPlan {
	if sc.plan != nil && sc.plan.g == *g {
		return sc.plan
	}
	s, P, kk := g.SH, g.OH*g.OW, g.KH*g.KW
	nch := (P + 15) / 16
	ph := s * s
	pl := &shiftPlan{g: *g}
	pl.fwd = simd.ConvShift{C: g.C, O: g.Out, KK: kk, P: P, XC: ph * P, XN: g.C * ph * P, YC: P, YN: g.Out * P,
		Off: make([]int32, kk), Mask: make([]uint16, kk*nch)}
	// Each tap's row and column offsets in its phase plane, and its phase.
	di, dj, tph := make([]int, kk), make([]int, kk), make([]int, kk)
	for i := 0; i < g.KH; i++ {
		for j := 0; j < g.KW; j++ {
			q := i*g.KW + j
			var a, b int
			di[q], a = phaseOf(i*g.DH-g.PH, s)
			dj[q], b = phaseOf(j*g.DW-g.PW, s)
			tph[q] = a*s + b
			pl.fwd.Off[q] = int32(tph[q]*P + di[q]*g.OW + dj[q])
			tapMask(pl.fwd.Mask[q*nch:(q+1)*nch], g.OH, g.OW, di[q], dj[q])
		}
	}
	pl.used = make([]bool, ph)
	for _, p := range tph {
		pl.used[p] = true
	}
	for p := 0; p < ph; p++ {
		var taps []int
		for q := 0; q < kk; q++ {
			if tph[q] == p {
				taps = append(taps, q)
			}
		}
		if len(taps) == 0 {
			continue
		}
		cs := simd.ConvShift{C: g.Out, O: g.C, KK: len(taps), P: P, XC: P, XN: g.Out * P, YC: ph * P, YN: g.C * ph * P,
			Off: make([]int32, len(taps)), Mask: make([]uint16, len(taps)*nch)}
		for t, q := range taps {
			cs.Off[t] = int32(-(di[q]*g.OW + dj[q]))
			tapMask(cs.Mask[t*nch:(t+1)*nch], g.OH, g.OW, -di[q], -dj[q])
		}
		pl.bwd = append(pl.bwd, shiftPhase{ph: p, taps: taps, cs: cs})
	}
	if s == 1 && g.OW%16 == 0 {
		pl.padF, pl.padB = padsOf(g.OH, g.OW, di, dj)
	}
	sc.plan = pl
	return pl
}

// padsOf is a stride-1 plan's padded planes for taps at row and column offsets di, dj: a
// border as wide as the largest offset, the forward's taps at (di, dj) and the data
// gradient's at (-di, -dj).
func padsOf(oh, ow int, di, dj []int) (fwd, bwd *simd.ConvPad) {
	ph, pw := 0, 0
	for q := range di {
		ph, pw = max(ph, di[q], -di[q]), max(pw, dj[q], -dj[q])
	}
	fwd = &simd.ConvPad{OH: oh, OW: ow, PH: ph, PW: pw}
	bwd = &simd.ConvPad{OH: oh, OW: ow, PH: ph, PW: pw}
	lw := ow + 2*pw
	for q := range di {
		fwd.Off = append(fwd.Off, int32((di[q]+ph)*lw+dj[q]+pw))
		bwd.Off = append(bwd.Off, int32((ph-di[q])*lw+pw-dj[q]))
	}
	return fwd, bwd
}

// padIn returns the padded planes of v (n·c planes of pad) in buf's scratch, reusing them
// when *of names v (the forward's planes of x serve the filter gradient of the same x, as
// phaseIn's do); false when the C kernel does not run.
func padIn(pad *simd.ConvPad, buf *gemmScratch, of *any, n, c int, v []float32) ([]float32, bool) {
	xp := gemmScratchOf[float32](buf, n*c*pad.Size())
	if of != nil {
		if prev, ok := (*of).([]float32); ok && len(prev) == len(v) && len(v) > 0 && &prev[0] == &v[0] {
			return xp, true
		}
	}
	hw := pad.OH * pad.OW
	if !splitRowsOK(n*c, pad.Size(), func(lo, hi int) bool {
		return simd.PadPlanes(pad, v[lo*hw:hi*hw], xp[lo*pad.Size():hi*pad.Size()], hi-lo)
	}) {
		return nil, false
	}
	if of != nil {
		*of = v
	}
	return xp, true
}

// phaseIn returns x as the kernels read it: x itself at stride 1, else its phase planes
// (N×C×s²×Ho·Wo, Note [Implicit convolution]; only those a kernel offset reads) in sc's
// buffer; false when the C kernels do not run (the caller takes the GEMM path). The forward's planes serve the filter gradient of the same x: within one run of
// a tape nothing writes x in between (conv_keep.go's reasoning).
func phaseIn(g *convGeom, sc *convScratch, pl *shiftPlan, n int, x []float32) ([]float32, bool) {
	s := g.SH
	if s == 1 {
		return x, true
	}
	P, hw := g.OH*g.OW, g.H*g.W
	xp := gemmScratchOf[float32](&sc.phase, n*g.C*s*s*P)
	if prev, ok := sc.phaseX.([]float32); ok && len(prev) == len(x) && len(x) > 0 && &prev[0] == &x[0] {
		return xp, true
	}
	if !splitRowsOK(n*g.C, s*s*P, func(lo, hi int) bool {
		return simd.PhaseSplit(x[lo*hw:hi*hw], xp[lo*s*s*P:hi*s*s*P], hi-lo, g.H, g.W, g.OH, g.OW, s, pl.usedBits())
	}) {
		return nil, false
	}
	sc.phaseX = x
	return xp, true
}

// convShiftForward is the forward of an implicit convolution: y (N×O×P) = w ⋆ x (+ b).
func convShiftForward(op *conv2dOp, x, w, b, y []float32) bool {
	g := &op.g
	op.sc.keepX, op.sc.phaseX, op.sc.padX = nil, nil, nil
	pl := op.sc.shiftPlanOf(g)
	K := g.colRows()
	wp := gemmScratchOf[float32](&op.sc.pack, K*g.Out)
	packShiftFwd(w, wp, g.Out, K)
	if pl.padF != nil && !shiftPadOff.Load() && simd.ConvShiftPadOK(&pl.fwd, pl.padF) {
		if xp, ok := padIn(pl.padF, &op.sc.pad, &op.sc.padX, op.n, g.C, x); ok && convShiftRun(&pl.fwd, pl.padF, op.n, xp, wp, b, y) {
			return true
		}
	}
	xp, ok := phaseIn(g, op.sc, pl, op.n, x)
	return ok && convShiftRun(&pl.fwd, nil, op.n, xp, wp, b, y)
}

// convShiftDataGrad is the data gradient of an implicit convolution: for each phase, dx's
// phase plane = Σ over that phase's kernel offsets of w[o, c, i, j]·dy[o] read back at the
// offset (Note [Implicit convolution]).
func convShiftDataGrad(op *convDataGradOp, w, dy, dx []float32) bool {
	g := &op.g
	pl := op.sc.shiftPlanOf(g)
	s, P, kk := g.SH, g.OH*g.OW, g.KH*g.KW
	out := dx
	if s > 1 {
		out = gemmScratchOf[float32](&op.sc.phaseDx, op.n*g.C*s*s*P)
	}
	src, pad := dy, (*simd.ConvPad)(nil)
	if s == 1 && pl.padB != nil && !shiftPadOff.Load() && simd.ConvShiftPadOK(&pl.bwd[0].cs, pl.padB) {
		if dp, ok := padIn(pl.padB, &op.sc.padDy, nil, op.n, g.Out, dy); ok {
			src, pad = dp, pl.padB
		}
	}
	for _, p := range pl.bwd {
		// Row o·len(taps) + t of the packed weights, column c: w[o, c, taps[t]].
		wp := gemmScratchOf[float32](&op.sc.pack, g.Out*len(p.taps)*g.C)
		packShiftBwd(w, wp, g.Out, g.C, kk, p.taps)
		if !convShiftRun(&p.cs, pad, op.n, src, wp, nil, out[p.ph*P:]) {
			return false
		}
	}
	return s == 1 || phaseOut(g, pl, op.n, out, dx)
}

// packShiftFwd packs the forward's weights: wp (K×O) is w (O×K) transposed, in blocks of
// eight rows of w so that each row of wp gets eight consecutive floats at a time (a copy:
// the same values however it is ordered).
func packShiftFwd(w, wp []float32, O, K int) {
	w, wp = w[:O*K], wp[:K*O]
	const blk = 8
	o0 := 0
	for ; o0+blk <= O; o0 += blk {
		r0, r1, r2, r3 := w[o0*K:(o0+1)*K], w[(o0+1)*K:(o0+2)*K], w[(o0+2)*K:(o0+3)*K], w[(o0+3)*K:(o0+4)*K]
		r4, r5, r6, r7 := w[(o0+4)*K:(o0+5)*K], w[(o0+5)*K:(o0+6)*K], w[(o0+6)*K:(o0+7)*K], w[(o0+7)*K:(o0+8)*K]
		for r := range r0 {
			d := wp[r*O+o0 : r*O+o0+blk : r*O+o0+blk]
			d[0], d[1], d[2], d[3] = r0[r], r1[r], r2[r], r3[r]
			d[4], d[5], d[6], d[7] = r4[r], r5[r], r6[r], r7[r]
		}
	}
	for ; o0 < O; o0++ {
		for r, v := range w[o0*K : (o0+1)*K] {
			wp[r*O+o0] = v
		}
	}
}

// packShiftBwd packs the data gradient's weights for one phase: row o·len(taps) + t of wp,
// column c (of C), is w[o, c, taps[t]] (w is O×C·kk), each row written in order.
func packShiftBwd(w, wp []float32, O, C, kk int, taps []int) {
	nt, K := len(taps), C*kk
	for o := 0; o < O; o++ {
		row := w[o*K : (o+1)*K]
		for t, q := range taps {
			d := wp[(o*nt+t)*C : (o*nt+t+1)*C]
			src := row[q:]
			for c := range d {
				d[c] = src[c*kk]
			}
		}
	}
}

// phaseOut puts the data gradient's phase planes xp (N×C×s²×Ho·Wo) back in place in dx
// (N×C×H×W); pixels of a phase without kernel offsets, or past the planes, get 0.
func phaseOut(g *convGeom, pl *shiftPlan, n int, xp, dx []float32) bool {
	s, P, hw := g.SH, g.OH*g.OW, g.H*g.W
	return splitRowsOK(n*g.C, hw, func(lo, hi int) bool {
		return simd.PhaseMerge(xp[lo*s*s*P:hi*s*s*P], dx[lo*hw:hi*hw], hi-lo, g.H, g.W, g.OH, g.OW, s, pl.usedBits())
	})
}

// convShiftRun runs simd.ConvShiftFwd of cs over the n images' units (16 pixels each,
// simd.ConvShiftUnits), split across Threads(), or simd.ConvShiftFwdPad over x's padded
// planes when pad is not nil; wp is the packed weights (C·KK × O of cs).
func convShiftRun(cs *simd.ConvShift, pad *simd.ConvPad, n int, x, wp, b, y []float32) bool {
	units := n * ((cs.P + 15) / 16)
	if pad == nil {
		units = simd.ConvShiftUnits(cs, n)
	}
	return splitRowsOK(units, 16*cs.O*cs.C*cs.KK/64, func(lo, hi int) bool {
		if pad != nil {
			return simd.ConvShiftFwdPad(cs, pad, x, wp, b, y, n, lo, hi)
		}
		return simd.ConvShiftFwd(cs, x, wp, b, y, n, lo, hi)
	})
}

// convShiftFilterGrad is the filter gradient of an implicit convolution: dw (O×C·kh·kw) =
// Σ over the batch of dy·cols(x)ᵀ, its rows split across Threads().
func convShiftFilterGrad(op *convFilterGradOp, x, dy, dw []float32) bool {
	g := &op.g
	pl := op.sc.shiftPlanOf(g)
	var xp []float32
	pad, ok := pl.padF, false
	if pad != nil && !shiftPadOff.Load() && simd.ConvShiftPadOK(&pl.fwd, pad) {
		xp, ok = padIn(pad, &op.sc.pad, &op.sc.padX, op.n, g.C, x)
	}
	if !ok {
		pad = nil
		if xp, ok = phaseIn(g, op.sc, pl, op.n, x); !ok {
			return false
		}
	}
	run := func(lo, hi int) bool {
		if pad != nil {
			return simd.ConvShiftWGradPad(&pl.fwd, pad, xp, dy, dw, op.n, lo, hi)
		}
		return simd.ConvShiftWGrad(&pl.fwd, xp, dy, dw, op.n, lo, hi)
	}
	w := min(threads(), g.Out/4, op.n*g.OH*g.OW*g.Out*g.colRows()/gemmGrain)
	if w <= 1 {
		return run(0, g.Out)
	}
	return splitWorkersOK(g.Out, w, 4, run)
}
