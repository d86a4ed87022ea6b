package ops

import (
	"math"
	"sync/atomic"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// Note [Small maps without the padding's products]
//
// Over a small feature map most of im2col's products are a weight times the zero padding: a
// 3x3 convolution with padding 1 over a 2x2 map (resnet18's layer4 at 64x64 images) has 4
// of its 9 taps inside the image at every output pixel, so 5/9 of the GEMM multiplies zeros;
// over 4x4 (its layer3) 44 of 144. Where ownGEMM holds, the forward of such a convolution
// runs on simd.GemmGather32 instead, whose inner dimension is read through tables that list
// only the products inside the image: per output pixel p, y[:, p] (O × N) = Σ over channels
// c and the taps t that land inside, w[o, c, t] · x[n, c, q(p, t)]. The weights are read
// where they lie; x is packed first with its images side by side in 16-wide vectors, and the
// result, pixel-major, is put back in NCHW with the bias: copies of the size of x and y.
//
// Each output sums its products in im2col's order, skipping the zero ones, with fused
// multiply-adds, as simd's kernels sum im2col's product under ownGEMM: the same values up
// to the sign of a zero (TestGatherForwardMatchesGEMM). The sums do not depend on the thread
// count.
//
// The gradients stay on the GEMM path. Gathered the same way they measured slower in the
// step: the data gradient reads the weights across their rows (and transposing them first
// cost more than it saved), and the filter gradient's result, tap-major, took a pass over dw
// as large as the saving to put back in place.

// convGatherMaxPixels is the most output pixels at which a convolution's forward products
// are gathered; convGatherMaxShare the largest share of im2col's products inside the image
// at which they are: resnet18's layer3 (4x4 at 64x64 images, 69% of the products inside)
// and layer4 (2x2, 44%). Measured at one thread on an AMD Zen 5 with OpenBLAS on its
// Haswell kernels (ownGEMM), the two paths alternated in one process (BenchmarkGatherAB,
// and the same with 14 windows of 3 steps): resnet18's training step 1.028x (87.5 -> 85.1
// ms) and 1.021x, resnet50's 1.005x and 1.008x; layer4's forward product alone (512 ×
// 4608 by 64 columns) 1.27 ms on simd.GemmRows32, 0.67 ms gathered. A machine whose BLAS
// runs AVX-512 kernels (no ownGEMM) keeps the GEMM path: not measured there.
const (
	convGatherMaxPixels = 16
	convGatherMaxShare  = 0.75
)

// gatherRowBlock is the rows of y one task computes, all of its output pixels while those
// rows of w stay in the cache: a multiple of every micro-kernel's rows (6, 8 and 12).
const gatherRowBlock = 48

// gatherOff turns the gathered forward off, for the tests and benchmarks that compare it
// with the GEMM path.
var gatherOff atomic.Bool

// convGather reports whether g's float32 forward runs on gathered products (Note [Small
// maps without the padding's products]): ownGEMM, one group, stride and dilation 1, at most
// convGatherMaxPixels output pixels, at most convGatherMaxShare of im2col's products inside
// the image, offsets into w and x within int32 (convGatherForward also checks the packed x's
// at the batch it runs).
func convGather(g *convGeom) bool {
	if gatherOff.Load() || !ownGEMM() || g.Groups != 1 || g.SH != 1 || g.SW != 1 || g.DH != 1 || g.DW != 1 ||
		g.OH*g.OW > convGatherMaxPixels || int64(g.Out)*int64(g.colRows()) > math.MaxInt32/2 ||
		int64(g.C)*int64(g.H)*int64(g.W) > math.MaxInt32/1024 {
		return false
	}
	inside := 0
	for p := range g.OH * g.OW {
		for t := range g.KH * g.KW {
			if _, ok := g.tapInput(p, t); ok {
				inside++
			}
		}
	}
	return float64(inside) <= convGatherMaxShare*float64(g.OH*g.OW*g.KH*g.KW)
}

// tapInput is the input pixel (h·W + w) that output pixel p reads at kernel tap t (stride
// and dilation 1), and whether it lies inside the image.
func (g *convGeom) tapInput(p, t int) (int, bool) {
	h := p/g.OW - g.PH + t/g.KW
	w := p%g.OW - g.PW + t%g.KW
	if h < 0 || h >= g.H || w < 0 || w >= g.W {
		return 0, false
	}
	return h*g.W + w, true
}

// gatherPlan holds a geometry's tables at one batch size: for each output pixel, the offsets
// in w (ka) and in the packed x (kb, rows of gatherCols(n) floats) of its products.
type gatherPlan struct {
	n      int
	ka, kb [][]int32
}

// gatherCols is the packed x's row length at batch n: the images, padded to a vector.
func gatherCols(n int) int { return (n + 15) / 16 * 16 }

// gatherPlanOf returns g's tables for batch n, built when n changes.
func (sc *convScratch) gatherPlanOf(g *convGeom, n int) *gatherPlan {
	if pl := sc.gather; pl != nil && pl.n == n {
		return pl
	}
	P, HW, KK, np := g.OH*g.OW, g.H*g.W, g.KH*g.KW, gatherCols(n)
	pl := &gatherPlan{n: n, ka: make([][]int32, P), kb: make([][]int32, P)}
	for p := range P {
		for c := range g.C {
			for t := range KK {
				if q, ok := g.tapInput(p, t); ok {
					pl.ka[p] = append(pl.ka[p], int32(c*KK+t))
					pl.kb[p] = append(pl.kb[p], int32((c*HW+q)*np))
				}
			}
		}
	}
	sc.gather = pl
	return pl
}

// convGatherForward is the forward of Note [Small maps without the padding's products]: y
// from x, w and the bias b (nil for none). It reports false when the kernel refused, y then
// to be computed by the GEMM path.
func convGatherForward(op *conv2dOp, x, w, b, y []float32) bool {
	g := &op.g
	n, P, HW, np := op.n, g.OH*g.OW, g.H*g.W, gatherCols(op.n)
	rows := g.C * HW
	if int64(rows)*int64(np) > math.MaxInt32 {
		return false // the tables' offsets into the packed x would not fit int32
	}
	pl := op.sc.gatherPlanOf(g, n)
	// bp[(c·HW + q)·np + i] = x[i, c, q]: x, [n, rows], transposed, zero past n.
	bp := gemmScratchOf[float32](&op.sc.gatherB, rows*np)
	transposeInto(x, n, rows, bp, np)
	if np > n {
		for r := range rows {
			clear(bp[r*np+n : (r+1)*np])
		}
	}
	// out[(o·P + p)·np + i] is y[i, o, p] less the bias; an output pixel none of whose taps
	// lands inside the image (padding as wide as the kernel) has no products: zeros.
	out := gemmScratchOf[float32](&op.sc.gatherOut, g.Out*P*np)
	kk := g.C * g.KH * g.KW
	blocks := (g.Out + gatherRowBlock - 1) / gatherRowBlock
	if !splitRowsOK(blocks, kk*gatherRowBlock, func(lo, hi int) bool {
		for blk := lo; blk < hi; blk++ {
			i0 := blk * gatherRowBlock
			m := min(gatherRowBlock, g.Out-i0)
			for p := range P {
				c := out[(i0*P+p)*np : ((i0+m-1)*P+p)*np+n]
				if len(pl.ka[p]) == 0 {
					for r := range m {
						clear(c[r*P*np : r*P*np+n])
					}
					continue
				}
				if !simd.GemmGather32(m, n, w[i0*kk:], kk, pl.ka[p], bp, pl.kb[p], c, P*np) {
					return false
				}
			}
		}
		return true
	}) {
		return false
	}
	splitRows(n, g.Out*P, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for o := range g.Out {
				var bo float32
				if b != nil {
					bo = b[o]
				}
				yo := y[(i*g.Out+o)*P : (i*g.Out+o+1)*P]
				for p := range yo {
					yo[p] = out[(o*P+p)*np+i] + bo
				}
			}
		}
	})
	return true
}
