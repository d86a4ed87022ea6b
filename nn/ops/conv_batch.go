package ops

import (
	"math"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// The batched path of Conv2d and its gradients, for small outputs. One GEMM per image
// multiplies [O, C*kh*kw] by [C*kh*kw, Ho*Wo]; when Ho*Wo is a handful of pixels (ResNet's
// layer3 and layer4 on 32x32 or 64x64 inputs: 4x4, 2x2) that GEMM is too skinny for the BLAS
// to get anywhere near its roof. Here the columns of a whole chunk of images sit side by side
// in one [C*kh*kw, nb*Ho*Wo] matrix, so each of forward, data gradient and filter gradient is
// one GEMM per chunk (and group), with an O(O*nb*Ho*Wo) copy between NCHW and the [O, nb*Ho*Wo]
// layout of the GEMM's output or input.

// When the batched path pays, measured with OpenBLAS on one thread as the thread CPU time
// of each op alone (resnet18's convolutions at batch 16 and 32, float32): at 1 to 4 output
// pixels it is 1.3-8x faster (a per-image GEMM streams the whole weight matrix for a few
// columns), at 9 to 16 pixels 1.0-1.5x; at 49 to 64 pixels 1.1-1.25x for 3x3x512 weights
// (9 MB, more than the cache holds) and 0.86-1.07x for smaller ones; at 256 pixels it is
// 10-30% slower, the batch's column matrix no longer fitting in the cache.
const (
	convBatchPixels     = 16       // Ho*Wo up to which the batched path is taken
	convBatchWideFactor = 4        // ... and up to this times more for big weights
	convBatchBigWeights = 4 << 20  // bytes of one group's weights that count as big
	convBatchBytes      = 32 << 20 // bound of a chunk's column matrix
)

// convScratch is the memory a convolution layer keeps between runs, shared by its forward,
// data-gradient and filter-gradient ops (which never run at the same time).
type convScratch struct {
	col     gemmScratch   // batched: im2col columns [C*kh*kw, nb*Ho*Wo]
	cols    []gemmScratch // per image: each worker's columns [C*kh*kw, Ho*Wo]
	dws     []gemmScratch // per image: workers' partial filter gradients (worker 0 writes dw)
	keep    gemmScratch   // the forward's columns of the whole batch, for the filter gradient
	keepX   any           // the x ([]T) whose columns keep holds; nil when none (conv_keep.go)
	mat     gemmScratch   // batched only: the output or dy of a chunk, [O, nb*Ho*Wo]
	tr      gemmScratch   // the filter gradient's transposed product (gemmABt)
	pack    gemmScratch   // an implicit convolution's packed weights (conv_shift.go)
	phase   gemmScratch   // ... its phase planes of x at stride > 1
	phaseX  any           // the x ([]float32) whose planes phase holds; nil when none
	phaseDx gemmScratch   // ... the data gradient's phase planes
	pad     gemmScratch   // ... its padded planes of x (forward, filter gradient)
	padX    any           // the x ([]float32) whose padded planes pad holds; nil when none
	padDy   gemmScratch   // ... the data gradient's padded planes of dy
	plan    *shiftPlan    // ... its tables
	idx     []int32       // the gather and scatter table of colIndex
	// im2col's gather by kernel offset q = (i, j), built with idx: gat[q*P+k] is the offset
	// in a channel plane of output pixel k's input (0 where it falls in the padding), and
	// padPos[padOff[q]:padOff[q+1]] the pixels k that do.
	gat, padPos, padOff []int32
	// The tables of simdIm2colShift (convShiftable geometries), built by shiftTable: shift[q]
	// is kernel offset q's offset of output pixel k's input from k, and bit k%16 of
	// shiftMask[q*ceil(P/16)+k/16] says that pixel's input is in the image.
	shift     []int32
	shiftMask []uint16
	// The gathered convolution's tables, packed operand and pixel-major result
	// (conv_gather.go).
	gather    *gatherPlan
	gatherB   gemmScratch
	gatherOut gemmScratch
}

// convCol2imShiftPixels is the fewest output pixels at which col2im takes the shifted
// planes of simdCol2imShift (see convCol2imRange).
const convCol2imShiftPixels = 16

// convShiftable reports whether g's im2col rows are whole channel planes read at an offset
// (stride 1 and lines as wide as the input's: k = oh*W + ow, input k + shift[q]), with
// the C kernels to read them.
func convShiftable(g *convGeom) bool {
	return simdOK() && g.SH == 1 && g.SW == 1 && g.OW == g.W && g.C*g.H*g.W <= math.MaxInt32
}

// shiftTable builds, once per geometry, the tables of simdIm2colShift when g is
// convShiftable; call it before goroutines share sc.
func (sc *convScratch) shiftTable(g *convGeom) {
	P, kk := g.OH*g.OW, g.KH*g.KW
	nch := (P + 15) / 16
	if !convShiftable(g) || (len(sc.shift) == kk && len(sc.shiftMask) == kk*nch) {
		return
	}
	sc.shift, sc.shiftMask = simd.ShiftTables(sGeom(g))
}

// colIndex returns the table, built on first use, that maps each element of one image's
// im2col matrix (row (c,i,j), column (oh,ow), C*kh*kw × Ho*Wo) to its offset in the image
// (C×H×W), -1 where it falls in the padding. With a handful of output pixels per row,
// im2col's and col2im's loops over rows and output lines are mostly overhead; a flat gather
// (scatter-add) through this table is several times faster.
func (sc *convScratch) colIndex(g *convGeom) []int32 {
	P := g.OH * g.OW
	if len(sc.idx) == g.colRows()*P {
		return sc.idx
	}
	sc.idx = make([]int32, 0, g.colRows()*P)
	sc.gat, sc.padPos, sc.padOff = make([]int32, 0, g.KH*g.KW*P), nil, []int32{0}
	for i := 0; i < g.KH; i++ {
		for j := 0; j < g.KW; j++ {
			for oh := 0; oh < g.OH; oh++ {
				ih := oh*g.SH - g.PH + i*g.DH
				for ow := 0; ow < g.OW; ow++ {
					iw := ow*g.SW - g.PW + j*g.DW
					if ih >= 0 && ih < g.H && iw >= 0 && iw < g.W {
						sc.gat = append(sc.gat, int32(ih*g.W+iw))
						continue
					}
					sc.padPos = append(sc.padPos, int32(oh*g.OW+ow))
					sc.gat = append(sc.gat, 0)
				}
			}
			sc.padOff = append(sc.padOff, int32(len(sc.padPos)))
		}
	}
	for c := 0; c < g.C; c++ {
		for i := 0; i < g.KH; i++ {
			for j := 0; j < g.KW; j++ {
				for oh := 0; oh < g.OH; oh++ {
					ih := oh*g.SH - g.PH + i*g.DH
					for ow := 0; ow < g.OW; ow++ {
						iw := ow*g.SW - g.PW + j*g.DW
						off := int32(-1)
						if ih >= 0 && ih < g.H && iw >= 0 && iw < g.W {
							off = int32((c*g.H+ih)*g.W + iw)
						}
						sc.idx = append(sc.idx, off)
					}
				}
			}
		}
	}
	return sc.idx
}

// convIndexPixels is the largest Ho*Wo at which im2col and col2im go through colIndex's
// table: measured 2-3x faster than the loops at 1 to 16 pixels, 1.1-1.7x at 64, and
// 0.6-0.75x at 256 and more, where the loops' copies of whole output lines win.
const convIndexPixels = 64

// convIm2col is im2col (image x into col, rows ld apart) by whichever way is faster at g's
// output size, its channels split across Threads(): the per-image path's GEMMs use every
// thread, and im2col on one core would leave the others idle in between.
func convIm2col[T Float](g *convGeom, sc *convScratch, x, col []T, ld int) {
	indexed := convIndexed(g)
	if indexed {
		sc.colIndex(g) // built before the goroutines share it
	}
	sc.shiftTable(g)
	kk := g.KH * g.KW
	splitRows(g.C, kk*g.OH*g.OW, func(lo, hi int) { convIm2colRange(g, sc, indexed, x, col, ld, lo, hi) })
}

// convCol2im is col2im (columns col, rows ld apart, summed into image dx) by whichever way
// is faster at g's output size, its channels split across Threads() as in convIm2col.
func convCol2im[T Float](g *convGeom, sc *convScratch, col, dx []T, ld int) {
	indexed := convIndexed(g)
	if indexed {
		sc.colIndex(g)
	}
	sc.shiftTable(g)
	kk := g.KH * g.KW
	splitRows(g.C, kk*g.OH*g.OW, func(lo, hi int) { convCol2imRange(g, sc, indexed, col, dx, ld, lo, hi) })
}

// convIndexed reports whether im2col and col2im go through colIndex's table at g's size.
func convIndexed(g *convGeom) bool {
	return g.OH*g.OW <= convIndexPixels && g.C*g.H*g.W <= math.MaxInt32
}

// convIm2colRange is convIm2col for channels [lo, hi), on the calling goroutine; with
// indexed the table must already be built.
func convIm2colRange[T Float](g *convGeom, sc *convScratch, indexed bool, x, col []T, ld, lo, hi int) {
	if xs, ok := any(x).([]float32); ok && simdOK() {
		cs := any(col).([]float32)
		if convShiftable(g) && len(sc.shift) == g.KH*g.KW {
			simdIm2colShift(g, sc, xs, cs, ld, lo, hi)
			return
		}
		if indexed {
			simdIm2colGather(g, sc, xs, cs, ld, lo, hi)
		} else {
			simdIm2colRange(g, xs, cs, ld, lo, hi)
		}
		return
	}
	if !indexed {
		im2colRange(g, x, col, ld, lo, hi)
		return
	}
	im2colGather(g, sc, x, col, ld, lo, hi)
}

// im2colGather is im2col for channels [lo, hi) through colIndex's per-offset tables (which
// must be built): each row gathers from its channel plane without a test per element, then
// the pixels in the padding are zeroed; im2colIndexed's test per element mispredicts at the
// borders.
func im2colGather[T Float](g *convGeom, sc *convScratch, x, col []T, ld, lo, hi int) {
	P, kk, hw := g.OH*g.OW, g.KH*g.KW, g.H*g.W
	for c := lo; c < hi; c++ {
		xc := x[c*hw : (c+1)*hw]
		for q := 0; q < kk; q++ {
			r := c*kk + q
			src := sc.gat[q*P : (q+1)*P]
			d := col[r*ld : r*ld+len(src)]
			for k, j := range src {
				d[k] = xc[j]
			}
			for _, k := range sc.padPos[sc.padOff[q]:sc.padOff[q+1]] {
				d[k] = 0
			}
		}
	}
}

// convCol2imRange is convCol2im for channels [lo, hi), on the calling goroutine; with
// indexed the table must already be built. Only those channels' planes of dx are written.
func convCol2imRange[T Float](g *convGeom, sc *convScratch, indexed bool, col, dx []T, ld, lo, hi int) {
	cs, c32 := any(col).([]float32)
	c32 = c32 && simdOK()
	// The shifted planes: measured 2x faster than the lines at 16x16 (resnet18's layer1), 5x
	// than the indexed scatter at 8x8, about even at 4x4, and 3.4x slower at 2x2, where four
	// lanes of each masked load and store are all there is to a row.
	if c32 && g.OH*g.OW >= convCol2imShiftPixels && convShiftable(g) && len(sc.shift) == g.KH*g.KW {
		simdCol2imShift(g, sc, cs, any(dx).([]float32), ld, lo, hi)
		return
	}
	if !indexed {
		if c32 {
			simdCol2imRange(g, cs, any(dx).([]float32), ld, lo, hi)
			return
		}
		col2imRange(g, col, dx, ld, lo, hi)
		return
	}
	P, kk, hw := g.OH*g.OW, g.KH*g.KW, g.H*g.W
	clear(dx[lo*hw : hi*hw])
	if c32 {
		simdCol2imIndexedAdd(sc.idx[lo*kk*P:hi*kk*P], P, cs[lo*kk*ld:], any(dx).([]float32), ld)
		return
	}
	col2imIndexedAdd(sc.idx[lo*kk*P:hi*kk*P], P, col[lo*kk*ld:], dx, ld)
}

// im2colIndexed is im2col through the table idx of colIndex: image x into col, whose rows
// of Ho*Wo start ld apart.
func im2colIndexed[T Float](idx []int32, P int, x, col []T, ld int) {
	for r := 0; r*P < len(idx); r++ {
		d := col[r*ld : r*ld+P]
		for k, j := range idx[r*P : (r+1)*P] {
			if j >= 0 {
				d[k] = x[j]
			} else {
				d[k] = 0
			}
		}
	}
}

// col2imIndexed is col2im through the table idx of colIndex: the columns col (rows ld
// apart) are summed into image dx, which is overwritten.
func col2imIndexed[T Float](idx []int32, P int, col, dx []T, ld int) {
	clear(dx)
	col2imIndexedAdd(idx, P, col, dx, ld)
}

// col2imIndexedAdd is col2imIndexed without clearing dx first.
func col2imIndexedAdd[T Float](idx []int32, P int, col, dx []T, ld int) {
	for r := 0; r*P < len(idx); r++ {
		s := col[r*ld : r*ld+P]
		for k, j := range idx[r*P : (r+1)*P] {
			if j >= 0 {
				dx[j] += s[k]
			}
		}
	}
}

// batchChunk returns the number of images per GEMM of the batched path for a batch of n
// images with elements of elem bytes, or 0 when the per-image path is the one to take. The
// batch is split into equal chunks whose column matrix and [O, nb*Ho*Wo] matrix each fit in
// g.batchBytes.
func (g *convGeom) batchChunk(n, elem int) int {
	P := g.OH * g.OW
	wBytes := (g.Out / g.Groups) * (g.colRows() / g.Groups) * elem
	small := P <= g.batchPix
	wide := P <= g.batchPix*convBatchWideFactor && wBytes >= convBatchBigWeights
	if n < 2 || !(small || wide) {
		return 0
	}
	most := max(1, g.batchBytes/(max(g.colRows(), g.Out)*P*elem))
	chunks := (n + most - 1) / most
	nb := (n + chunks - 1) / chunks
	if nb < 2 {
		return 0
	}
	return nb
}

// elemSize is the size in bytes of a T.
func elemSize[T Float]() int {
	var z T
	if _, ok := any(z).(float32); ok {
		return 4
	}
	return 8
}

// convForwardBatched is the forward for chunks of nb images: y (N×O×Ho×Wo) = w ⋆ x (+ b).
func convForwardBatched[T Float](op *conv2dOp, nb int, x, w, b, y []T) {
	g := &op.g
	Cg, Og := g.C/g.Groups, g.Out/g.Groups
	Kg, P := Cg*g.KH*g.KW, g.OH*g.OW
	var col []T
	if nb >= op.n {
		col = convKeepBuf[T](g, op.sc, op.n)
	} else {
		op.sc.keepX = nil
	}
	kept := col != nil
	if !kept {
		col = gemmScratchOf[T](&op.sc.col, g.colRows()*nb*P)
	}
	mat := gemmScratchOf[T](&op.sc.mat, g.Out*nb*P)
	chw := g.C * g.H * g.W
	for n0 := 0; n0 < op.n; n0 += nb {
		m := min(nb, op.n-n0)
		ld := m * P
		batchIm2col(g, op.sc, x[n0*chw:(n0+m)*chw], col, m, ld)
		for gr := 0; gr < g.Groups; gr++ {
			if !gemmRowsIf(convRows(Og, ld, Kg), false, Og, ld, Kg, w[gr*Og*Kg:], Kg, col[gr*Kg*ld:], ld, nil, mat[gr*Og*ld:], ld) {
				gemmPar(false, false, Og, ld, Kg, 1, w[gr*Og*Kg:], Kg, col[gr*Kg*ld:], ld, 0, mat[gr*Og*ld:], ld)
			}
		}
		splitRows(m, g.Out*P, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				yn := y[(n0+i)*g.Out*P : (n0+i+1)*g.Out*P]
				for o := 0; o < g.Out; o++ {
					dst, src := yn[o*P:(o+1)*P], mat[o*ld+i*P:o*ld+(i+1)*P]
					if b == nil {
						copy(dst, src)
						continue
					}
					bo := b[o]
					for k, v := range src {
						dst[k] = v + bo
					}
				}
			}
		})
	}
	if kept {
		op.sc.keepX = x
	}
}

// gatherDy copies images n0..n0+m-1 of dy (N×O×P) into mat as the [O, m*P] matrix whose row
// o holds dy[n0, o, :], dy[n0+1, o, :], ...
func gatherDy[T Float](dy, mat []T, n0, m, O, P int) {
	ld := m * P
	splitRows(m, O*P, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dyn := dy[(n0+i)*O*P : (n0+i+1)*O*P]
			for o := 0; o < O; o++ {
				copy(mat[o*ld+i*P:o*ld+(i+1)*P], dyn[o*P:(o+1)*P])
			}
		}
	})
}

// batchIm2col writes the columns of the m images of x (m×C×H×W) side by side into col,
// rows ld = m*Ho*Wo apart, the images split across Threads().
func batchIm2col[T Float](g *convGeom, sc *convScratch, x, col []T, m, ld int) {
	indexed := convIndexed(g)
	if indexed {
		sc.colIndex(g)
	}
	sc.shiftTable(g)
	chw, P := g.C*g.H*g.W, g.OH*g.OW
	splitRows(m, g.colRows()*P, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			convIm2colRange(g, sc, indexed, x[i*chw:(i+1)*chw], col[i*P:], ld, 0, g.C)
		}
	})
}

// convDataGradBatched is the data gradient for chunks of nb images: the columns' gradient
// wᵀ·dy as one GEMM per chunk, then col2im per image into dx (N×C×H×W).
func convDataGradBatched[T Float](op *convDataGradOp, nb int, w, dy, dx []T) {
	g := &op.g
	Cg, Og := g.C/g.Groups, g.Out/g.Groups
	Kg, P := Cg*g.KH*g.KW, g.OH*g.OW
	col := gemmScratchOf[T](&op.sc.col, g.colRows()*nb*P)
	mat := gemmScratchOf[T](&op.sc.mat, g.Out*nb*P)
	chw := g.C * g.H * g.W
	for n0 := 0; n0 < op.n; n0 += nb {
		m := min(nb, op.n-n0)
		ld := m * P
		gatherDy(dy, mat, n0, m, g.Out, P)
		for gr := 0; gr < g.Groups; gr++ {
			gemmPar(true, false, Kg, ld, Og, 1, w[gr*Og*Kg:], Kg, mat[gr*Og*ld:], ld, 0, col[gr*Kg*ld:], ld)
		}
		indexed := convIndexed(g)
		if indexed {
			op.sc.colIndex(g)
		}
		op.sc.shiftTable(g)
		splitRows(m, g.colRows()*P, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				convCol2imRange(g, op.sc, indexed, col[i*P:], dx[(n0+i)*chw:(n0+i+1)*chw], ld, 0, g.C)
			}
		})
	}
}

// convFilterGradBatched is the filter gradient for chunks of nb images: dw (O×C/groups×kh×kw)
// = Σ over chunks of dy·colsᵀ, one GEMM per chunk accumulating into dw.
func convFilterGradBatched[T Float](op *convFilterGradOp, nb int, x, dy, dw []T) {
	g := &op.g
	Cg, Og := g.C/g.Groups, g.Out/g.Groups
	Kg, P := Cg*g.KH*g.KW, g.OH*g.OW
	var kept []T
	if nb >= op.n {
		kept = convKept(g, op.sc, op.n, x)
	}
	col := kept
	if col == nil {
		col = gemmScratchOf[T](&op.sc.col, g.colRows()*nb*P)
	}
	mat := gemmScratchOf[T](&op.sc.mat, g.Out*nb*P)
	chw := g.C * g.H * g.W
	for n0 := 0; n0 < op.n; n0 += nb {
		m := min(nb, op.n-n0)
		ld := m * P
		if kept == nil {
			batchIm2col(g, op.sc, x[n0*chw:(n0+m)*chw], col, m, ld)
		}
		gatherDy(dy, mat, n0, m, g.Out, P)
		var beta T
		if n0 > 0 {
			beta = 1
		}
		for gr := 0; gr < g.Groups; gr++ {
			if beta == 0 {
				gemmABt(&op.sc.tr, Og, Kg, ld, mat[gr*Og*ld:], ld, col[gr*Kg*ld:], ld, dw[gr*Og*Kg:], Kg)
				continue
			}
			gemmPar(false, true, Og, Kg, ld, 1, mat[gr*Og*ld:], ld, col[gr*Kg*ld:], ld, beta, dw[gr*Og*Kg:], Kg)
		}
	}
}
