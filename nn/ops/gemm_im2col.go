package ops

import (
	"fmt"
	"sync/atomic"

	// OpenBLAS with cgo, registered with gonum and gorgonia: every program that runs these
	// kernels gets it, not only those that import the internal package themselves.
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/internal/simd"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gemm computes c = alpha*op(a)*op(b) + beta*c with row-major operands: op(a) is m×k,
// op(b) is k×n, c is m×n. It calls the BLAS registered in gonum's blas32/blas64
// (OpenBLAS with cgo, which this package imports internal/blasimpl to register; gonum's
// pure-Go BLAS otherwise), or under ownGEMM simd's kernels for the float32 products they
// compute (ownGemm32).
func gemm[T Float](tA, tB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if a32, ok := any(a).([]float32); ok && ownGEMM() &&
		ownGemm32(tA, tB, m, n, k, float32(alpha), a32, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc) {
		return
	}
	ta, tb := blas.NoTrans, blas.NoTrans
	if tA {
		ta = blas.Trans
	}
	if tB {
		tb = blas.Trans
	}
	switch av := any(a).(type) {
	case []float32:
		blas32.Implementation().Sgemm(ta, tb, m, n, k, float32(alpha), av, lda,
			any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		blas64.Implementation().Dgemm(ta, tb, m, n, k, float64(alpha), av, lda,
			any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
}

// blasNarrow is blasimpl.Narrow(), read at start: the BLAS runs float32 kernels narrower
// than the CPU's full-width AVX-512 units. The tests set it to run ownGEMM's dispatch on any
// CPU with AVX-512.
var blasNarrow atomic.Bool

func init() { blasNarrow.Store(blasimpl.Narrow()) }

// ownGEMMOff, when true, turns ownGEMM off: for the benchmarks that compare simd's kernels
// with the BLAS in one process.
var ownGEMMOff atomic.Bool

// ownGEMM reports whether the float32 products go to simd's AVX-512 kernels wherever those
// can compute them (gemm, and the linear layers' products with their bias), rather than
// only where simd's Fits functions say they beat OpenBLAS's AVX-512 kernels: at level
// AVX512 where the BLAS runs narrower kernels (blasNarrow). Measured on an AMD Zen 5 with
// OpenBLAS on its Haswell kernels at one thread, on each of swin_t's linear layers at batch
// 8: the kernels 205 to 256 GFLOP/s against OpenBLAS's 95 to 132 (forward, data and weight
// gradients alike).
func ownGEMM() bool {
	return !ownGEMMOff.Load() && blasNarrow.Load() && simd.Current() == simd.AVX512
}

// ownGemmMinCols is the fewest columns of c that ownGEMM sends to simd's kernels: one
// vector's lanes. A narrower product would leave most of each vector empty.
const ownGemmMinCols = 16

// ownGemm32 computes gemm's float32 product with simd's kernels and reports whether it did,
// where alpha is 1 and c has at least ownGemmMinCols columns: c = a·op(b) with
// simd.GemmRows32 (beta 0) or GemmRowsAdd32 (beta 1, a convolution's filter gradient summed
// over images), and c = aᵀ·b with simd.GemmDW32 (beta 0, n a multiple of 16); false,
// computing nothing, for the rest (aᵀ·bᵀ, other alpha or beta, fewer columns), which the
// BLAS then computes. The kernels' sums do not depend on how a caller splits c into blocks
// of rows or of columns (gemmPar), so neither do the bits.
func ownGemm32(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	switch {
	case alpha != 1 || n < ownGemmMinCols:
		return false
	case !tA && beta == 0:
		return simd.GemmRows32(tB, m, n, k, a, lda, b, ldb, nil, c, ldc)
	case !tA && beta == 1:
		return simd.GemmRowsAdd32(tB, m, n, k, a, lda, b, ldb, c, ldc)
	case !tB && beta == 0:
		return simd.GemmDW32(m, n, k, a, lda, b, ldb, c, ldc)
	}
	return false
}

// convGeom is the geometry of one 2-D convolution or pooling window, NCHW.
type convGeom struct {
	C, H, W    int // input channels and size
	KH, KW     int // kernel size
	SH, SW     int // stride
	PH, PW     int // padding
	DH, DW     int // dilation
	OH, OW     int // output size
	Groups     int
	Out        int // output channels (conv only)
	directCols bool
	batchPix   int // conv only: largest OH*OW of the batched path (conv_batch.go)
	batchBytes int // conv only: memory bound of a chunk of the batched path
}

// convOutSize is PyTorch's output size: floor((in + 2p - d(k-1) - 1)/s) + 1.
func convOutSize(in, k, s, p, d int) int { return (in+2*p-d*(k-1)-1)/s + 1 }

// colRows is the number of rows of the im2col matrix of one image (C*KH*KW).
func (g *convGeom) colRows() int { return g.C * g.KH * g.KW }

// convValidRange returns the range [lo, hi) of output positions o whose input position
// o*s - p + off lies in [0, n).
func convValidRange(n, out, s, p, off int) (lo, hi int) {
	// o*s >= p-off  and  o*s <= n-1+p-off
	a := p - off
	if a > 0 {
		lo = (a + s - 1) / s
	}
	b := n - 1 + p - off
	if b < 0 {
		return 0, 0
	}
	hi = b/s + 1
	if hi > out {
		hi = out
	}
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// im2col writes the columns of image x (C×H×W) into col (C*KH*KW rows of OH*OW, row r
// starting at col[r*ld]; ld >= OH*OW), row (c, i, j) holding
// x[c, oh*SH-PH+i*DH, ow*SW-PW+j*DW] (0 outside the image). ld > OH*OW places one image's
// columns inside the column matrix of a batch.
func im2col[T Float](g *convGeom, x, col []T, ld int) { im2colRange(g, x, col, ld, 0, g.C) }

// im2colRange is im2col for channels [lo, hi) only: their rows of col, from x's channels.
func im2colRange[T Float](g *convGeom, x, col []T, ld, lo, hi int) {
	P := g.OH * g.OW
	row := lo * g.KH * g.KW
	for c := lo; c < hi; c++ {
		xc := x[c*g.H*g.W : (c+1)*g.H*g.W]
		for i := 0; i < g.KH; i++ {
			for j := 0; j < g.KW; j++ {
				dst := col[row*ld : row*ld+P]
				row++
				wlo, whi := convValidRange(g.W, g.OW, g.SW, g.PW, j*g.DW)
				for oh := 0; oh < g.OH; oh++ {
					d := dst[oh*g.OW : (oh+1)*g.OW]
					ih := oh*g.SH - g.PH + i*g.DH
					if ih < 0 || ih >= g.H {
						clear(d)
						continue
					}
					clear(d[:wlo])
					clear(d[whi:])
					src := xc[ih*g.W:]
					iw0 := wlo*g.SW - g.PW + j*g.DW
					if g.SW == 1 {
						copy(d[wlo:whi], src[iw0:iw0+whi-wlo])
						continue
					}
					for ow, iw := wlo, iw0; ow < whi; ow, iw = ow+1, iw+g.SW {
						d[ow] = src[iw]
					}
				}
			}
		}
	}
}

// col2im adds the columns col (C*KH*KW rows of OH*OW, row r starting at col[r*ld]) back
// into image dx (C×H×W); dx is overwritten (zeroed first).
func col2im[T Float](g *convGeom, col, dx []T, ld int) { col2imRange(g, col, dx, ld, 0, g.C) }

// col2imRange is col2im for channels [lo, hi) only: the rows of those channels into their
// planes of dx, which alone are overwritten.
func col2imRange[T Float](g *convGeom, col, dx []T, ld, lo, hi int) {
	clear(dx[lo*g.H*g.W : hi*g.H*g.W])
	P := g.OH * g.OW
	row := lo * g.KH * g.KW
	for c := lo; c < hi; c++ {
		xc := dx[c*g.H*g.W : (c+1)*g.H*g.W]
		for i := 0; i < g.KH; i++ {
			for j := 0; j < g.KW; j++ {
				src := col[row*ld : row*ld+P]
				row++
				wlo, whi := convValidRange(g.W, g.OW, g.SW, g.PW, j*g.DW)
				for oh := 0; oh < g.OH; oh++ {
					ih := oh*g.SH - g.PH + i*g.DH
					if ih < 0 || ih >= g.H {
						continue
					}
					s := src[oh*g.OW : (oh+1)*g.OW]
					d := xc[ih*g.W:]
					iw := wlo*g.SW - g.PW + j*g.DW
					if g.SW == 1 {
						dd := d[iw : iw+whi-wlo]
						ss := s[wlo:whi]
						for k := range dd {
							dd[k] += ss[k]
						}
						continue
					}
					for ow := wlo; ow < whi; ow, iw = ow+1, iw+g.SW {
						d[iw] += s[ow]
					}
				}
			}
		}
	}
}

// gemmScratch is memory an op keeps between runs (im2col columns, output tensors); its
// slices only grow.
type gemmScratch struct {
	f32 []float32
	f64 []float64
}

// gemmScratchOf returns n elements of s's buffer for T, growing it if needed.
func gemmScratchOf[T Float](s *gemmScratch, n int) []T {
	var z T
	switch any(z).(type) {
	case float32:
		if cap(s.f32) < n {
			s.f32 = make([]float32, n)
		}
		return any(s.f32[:n]).([]T)
	default:
		if cap(s.f64) < n {
			s.f64 = make([]float64, n)
		}
		return any(s.f64[:n]).([]T)
	}
}

// kernOut is an output tensor an op owns and returns from Do on every run, so that a
// machine that resets its registers between runs does not allocate a new one each time.
type kernOut struct{ t *tensor.Dense }

// get returns the op's output tensor with dtype dt and the given shape, allocating it only
// when none fits. A downstream in-place reshape (gorgonia's Reshape does that) is undone.
func (b *kernOut) get(dt tensor.Dtype, shape tensor.Shape) (*tensor.Dense, error) {
	if b.t != nil && b.t.Dtype() == dt && b.t.Shape().TotalSize() == shape.TotalSize() && !b.t.IsView() {
		if !b.t.Shape().Eq(shape) {
			if err := b.t.Reshape(shape...); err != nil {
				return nil, err
			}
		}
		return b.t, nil
	}
	b.t = tensor.New(tensor.Of(dt), tensor.WithShape(shape.Clone()...))
	return b.t, nil
}

// kernData returns v's contiguous elements as []T, checking the dtype and the number of
// elements; views are materialised (a copy).
func kernData[T Float](op string, v G.Value, what string, size int) ([]T, error) {
	d, err := Dense(op, v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if d.IsView() {
		d = d.Materialize().(*tensor.Dense)
	}
	s, ok := d.Data().([]T)
	if !ok {
		return nil, fmt.Errorf("%s: %s has dtype %v, mixed with another dtype", op, what, d.Dtype())
	}
	if len(s) != size {
		return nil, fmt.Errorf("%s: %s has %d elements (shape %v), want %d", op, what, len(s), d.Shape(), size)
	}
	return s, nil
}
