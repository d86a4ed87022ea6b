package ops

import (
	"sync/atomic"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// Note [Implicit convolution]
//
// A float32 convolution of stride 1 whose output has its input's size (ResNet's 3x3
// convolutions with padding 1) runs its forward, data gradient and filter gradient as
// implicit GEMMs (internal/simd's ConvShiftFwd and ConvShiftWGrad): the kernels read each
// row of the im2col matrix straight from the image, a channel's plane at the kernel offset's
// shift with the padding masked off (shiftTable's tables), instead of materialising the
// matrix. im2col wrote, and the GEMM read back, nine times the image per layer: on small
// feature maps (the Fashion-MNIST demo's resnet8_s2: 14x14, 7x7, 4x4) that traffic, the
// copies between NCHW and the batched path's layout, and OpenBLAS's packing of skinny
// operands cost more than the multiply-adds.
//
// The data gradient of such a convolution is itself one: dx = conv(dy, w'), w'[c, o, q] =
// w[o, c, kk-1-q] (the kernel flipped, its channels swapped), over the same geometry (the
// padding that keeps the size is symmetric, so the flipped kernel's shifts are the
// negated ones and the masks are the same tables), so it runs the forward's kernel with
// the weights packed the other way, and col2im's scatter is gone too.
//
// The sums are the same products in another order than im2col and OpenBLAS's: each output
// of the forward and the data gradient sums its C·kh·kw products in the order of im2col's
// rows with fused multiply-adds, each filter gradient sums the batch's pixels in 16 lanes
// and then the lanes. The results differ from the GEMM path's by float32 rounding (the tests
// bound both against float64 and PyTorch as they bound the GEMM path), are the same bits at
// every SIMD level and thread count, and run at level off through the GEMM path.

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
)

// convImplicit reports whether g's convolution runs as an implicit GEMM for float32 (Note
// [Implicit convolution]): the C kernels, one group, stride 1, the output the input's size,
// not a 1x1 convolution without padding (whose GEMM reads the image as it is), and within
// the bounds above.
func convImplicit(g *convGeom) bool {
	return simdOK() && !implicitOff.Load() && g.Groups == 1 && !g.directCols && g.SH == 1 && g.SW == 1 &&
		g.OH == g.H && g.OW == g.W && g.OH*g.OW >= convImplicitPixels && g.Out*g.colRows()*4 <= convImplicitWeights &&
		convShiftable(g)
}

// implicitOff turns the implicit convolution off, for the tests that compare it with the
// GEMM path.
var implicitOff atomic.Bool

// convShiftForward is the forward of an implicit convolution: y (N×O×P) = w ⋆ x (+ b).
func convShiftForward(op *conv2dOp, x, w, b, y []float32) bool {
	g := &op.g
	op.sc.keepX = nil
	op.sc.shiftTable(g)
	K := g.colRows()
	wp := gemmScratchOf[float32](&op.sc.pack, K*g.Out)
	for o := 0; o < g.Out; o++ {
		for r, v := range w[o*K : (o+1)*K] {
			wp[r*g.Out+o] = v
		}
	}
	return convShiftRun(op.sc, op.n, g.C, g.Out, g, x, wp, b, y)
}

// convShiftDataGrad is the data gradient of an implicit convolution: dx (N×C×P) = dy ⋆ w',
// w' the kernel flipped with its channels swapped (Note [Implicit convolution]).
func convShiftDataGrad(op *convDataGradOp, w, dy, dx []float32) bool {
	g := &op.g
	op.sc.shiftTable(g)
	kk, K := g.KH*g.KW, g.colRows()
	// Row o·kk + q of the packed weights, column c: w[o, c, kk-1-q].
	wp := gemmScratchOf[float32](&op.sc.pack, g.Out*kk*g.C)
	for o := 0; o < g.Out; o++ {
		for c := 0; c < g.C; c++ {
			src := w[o*K+c*kk : o*K+(c+1)*kk]
			for q := 0; q < kk; q++ {
				wp[(o*kk+q)*g.C+c] = src[kk-1-q]
			}
		}
	}
	return convShiftRun(op.sc, op.n, g.Out, g.C, g, dy, wp, nil, dx)
}

// convShiftRun runs simd.ConvShiftFwd over the n images' units (16 pixels each), split
// across Threads(): in channels cin, out channels cout, packed weights wp (cin·kk × cout).
func convShiftRun(sc *convScratch, n, cin, cout int, g *convGeom, x, wp, b, y []float32) bool {
	P, kk := g.OH*g.OW, g.KH*g.KW
	units := n * ((P + 15) / 16)
	var failed atomic.Bool
	splitRows(units, 16*cout*cin*kk/64, func(lo, hi int) {
		if !simd.ConvShiftFwd(x, wp, b, y, n, cin, cout, kk, P, sc.shift, sc.shiftMask, lo, hi) {
			failed.Store(true)
		}
	})
	return !failed.Load()
}

// convShiftFilterGrad is the filter gradient of an implicit convolution: dw (O×C·kh·kw) =
// Σ over the batch of dy·cols(x)ᵀ, its rows split across Threads().
func convShiftFilterGrad(op *convFilterGradOp, x, dy, dw []float32) bool {
	g := &op.g
	op.sc.shiftTable(g)
	P, kk := g.OH*g.OW, g.KH*g.KW
	w := min(threads(), g.Out/4, op.n*P*g.Out*g.colRows()/gemmGrain)
	if w <= 1 {
		return simd.ConvShiftWGrad(x, dy, dw, op.n, g.C, g.Out, kk, P, op.sc.shift, op.sc.shiftMask, 0, g.Out)
	}
	var failed atomic.Bool
	splitWorkers(g.Out, w, 4, func(_, lo, hi int) {
		if !simd.ConvShiftWGrad(x, dy, dw, op.n, g.C, g.Out, kk, P, op.sc.shift, op.sc.shiftMask, lo, hi) {
			failed.Store(true)
		}
	})
	return !failed.Load()
}
