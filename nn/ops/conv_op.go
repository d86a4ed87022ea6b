package ops

import (
	"fmt"
	"hash"
	"sync/atomic"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/internal/simd"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ConvOpts are the hyper-parameters of Conv2d, as torch.nn.Conv2d's. A zero Stride or
// Dilation entry means 1, a zero Groups means 1; Padding is zero padding on both sides.
type ConvOpts struct {
	Stride, Padding, Dilation [2]int
	Groups                    int
}

// Conv2d is a 2-D cross-correlation as torch.nn.functional.conv2d: x is [N, C, H, W], w is
// [O, C/groups, kh, kw], b is [O] or nil; the output is [N, O, Ho, Wo] with
// Ho = floor((H + 2*pad - dil*(kh-1) - 1)/stride) + 1 (Wo alike). Float32 or float64.
//
// It runs as im2col plus one GEMM per image and group (a 1x1 stride-1 unpadded convolution
// multiplies the image directly); the backward pass is a GEMM plus col2im for x, a GEMM
// accumulated over the batch for w, and a reduction for b. When the output has at most
// 16 pixels (64 with big weights), the columns of the whole batch (in chunks of at most
// 32 MB) go into one GEMM instead, which keeps small feature maps fast (see conv_batch.go);
// where the project's own kernels take every product (ownGEMM), the forward over such a map
// sums only the products inside the image (see conv_gather.go).
// Column buffers and the output live in the op and are reused across runs, so one graph
// must not run on two machines at the same time.
func Conv2d(x, w, b *G.Node, o ConvOpts) (*G.Node, error) {
	const name = "ops.Conv2d"
	nodes := []*G.Node{x, w}
	if b != nil {
		nodes = append(nodes, b)
	}
	if err := kernCheckFloat(name, nodes...); err != nil {
		return nil, err
	}
	xs, ws := x.Shape(), w.Shape()
	if xs.Dims() != 4 || ws.Dims() != 4 {
		return nil, fmt.Errorf("%s: x %v and w %v must both have rank 4 (x [N,C,H,W], w [O,C/groups,kh,kw])", name, xs, ws)
	}
	g, err := newConvGeom(xs, ws, o)
	if err != nil {
		return nil, fmt.Errorf("%s: x %v, w %v: %w", name, xs, ws, err)
	}
	if b != nil {
		if bs := b.Shape(); bs.Dims() != 1 || bs[0] != g.Out {
			return nil, fmt.Errorf("%s: bias %v, want [%d] for w %v", name, bs, g.Out, ws)
		}
	}
	op := &conv2dOp{kernBase: newKernBase(name, len(nodes)), g: g, n: xs[0], sc: new(convScratch)}
	out, err := G.ApplyOp(op, nodes...)
	if err != nil {
		return nil, fmt.Errorf("%s: x %v, w %v: %w", name, xs, ws, err)
	}
	return out, nil
}

// newConvGeom validates the shapes and options of a convolution and returns its geometry.
func newConvGeom(xs, ws tensor.Shape, o ConvOpts) (convGeom, error) {
	one := func(v int) int {
		if v == 0 {
			return 1
		}
		return v
	}
	g := convGeom{
		C: xs[1], H: xs[2], W: xs[3], KH: ws[2], KW: ws[3], Out: ws[0],
		SH: one(o.Stride[0]), SW: one(o.Stride[1]), PH: o.Padding[0], PW: o.Padding[1],
		DH: one(o.Dilation[0]), DW: one(o.Dilation[1]), Groups: one(o.Groups),
	}
	for _, s := range xs {
		if s < 1 {
			return g, fmt.Errorf("empty input")
		}
	}
	for _, s := range ws {
		if s < 1 {
			return g, fmt.Errorf("empty weight")
		}
	}
	switch {
	case g.SH < 1 || g.SW < 1 || g.DH < 1 || g.DW < 1 || g.Groups < 1:
		return g, fmt.Errorf("stride %v, dilation %v and groups %d must be positive", o.Stride, o.Dilation, o.Groups)
	case g.PH < 0 || g.PW < 0:
		return g, fmt.Errorf("negative padding %v", o.Padding)
	case g.C%g.Groups != 0 || g.Out%g.Groups != 0:
		return g, fmt.Errorf("%d input and %d output channels are not divisible by groups %d", g.C, g.Out, g.Groups)
	case ws[1] != g.C/g.Groups:
		return g, fmt.Errorf("x has %d channels, w expects %d per group with groups %d (%d in all)", g.C, ws[1], g.Groups, ws[1]*g.Groups)
	}
	g.OH = convOutSize(g.H, g.KH, g.SH, g.PH, g.DH)
	g.OW = convOutSize(g.W, g.KW, g.SW, g.PW, g.DW)
	if g.OH < 1 || g.OW < 1 {
		return g, fmt.Errorf("output size %dx%d is empty (kernel %dx%d, dilation %v, padding %v)", g.OH, g.OW, g.KH, g.KW, o.Dilation, o.Padding)
	}
	g.directCols = g.KH == 1 && g.KW == 1 && g.SH == 1 && g.SW == 1 && g.PH == 0 && g.PW == 0
	g.batchPix, g.batchBytes = convBatchPixels, convBatchBytes
	return g, nil
}

// conv2dOp is the forward convolution; inputs x, w and optionally b.
type conv2dOp struct {
	kernBase
	g  convGeom
	n  int          // batch size
	sc *convScratch // im2col columns, shared with the backward ops of the same layer
}

func (op *conv2dOp) outShape() tensor.Shape { return tensor.Shape{op.n, op.g.Out, op.g.OH, op.g.OW} }

// Type is (x: 4-D, w: 4-D[, b: 1-D]) -> 4-D, one element type.
func (op *conv2dOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	t4 := G.TensorType{Dims: 4, Of: a}
	if op.arity == 3 {
		return hm.NewFnType(t4, t4, G.TensorType{Dims: 1, Of: a}, t4)
	}
	return hm.NewFnType(t4, t4, t4)
}

// InferShape returns [N, O, Ho, Wo].
func (op *conv2dOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.outShape(), nil }

// Do runs the convolution into the op's own output tensor.
func (op *conv2dOp) Do(in ...G.Value) (G.Value, error) { return kernDo(op, &op.kernBase, in) }

// UsePreallocDo runs the convolution into the op's reused output (see kernPrealloc).
func (op *conv2dOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	return kernPrealloc(op, &op.kernBase, p, in)
}

// WriteHash writes the op's identity.
func (op *conv2dOp) WriteHash(h hash.Hash) { kernHash(h, &op.kernBase, op.g) }

// Hashcode hashes WriteHash.
func (op *conv2dOp) Hashcode() uint32 { return HashOf(op) }

func (op *conv2dOp) String() string {
	return fmt.Sprintf("Conv2d{%dx%d s%d,%d p%d,%d d%d,%d g%d}", op.g.KH, op.g.KW, op.g.SH, op.g.SW, op.g.PH, op.g.PW, op.g.DH, op.g.DW, op.g.Groups)
}

// DiffWRT: differentiable with respect to every input.
func (op *conv2dOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

// SymDiff returns the gradient nodes for x, w (and b).
func (op *conv2dOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	x, w := inputs[0], inputs[1]
	dx, err := G.ApplyOp(&convDataGradOp{kernBase: newKernBase("ops.Conv2d.grad_x", 2), g: op.g, n: op.n, sc: op.sc}, w, grad)
	if err != nil {
		return nil, fmt.Errorf("%s: gradient of x: %w", op.name, err)
	}
	dw, err := G.ApplyOp(&convFilterGradOp{kernBase: newKernBase("ops.Conv2d.grad_w", 2), g: op.g, n: op.n, sc: op.sc}, x, grad)
	if err != nil {
		return nil, fmt.Errorf("%s: gradient of w: %w", op.name, err)
	}
	if op.arity == 2 {
		return G.Nodes{dx, dw}, nil
	}
	db, err := G.ApplyOp(&biasGradOp{kernBase: newKernBase("ops.Conv2d.grad_b", 1), n: op.n, c: op.g.Out, inner: op.g.OH * op.g.OW, dims: 4}, grad)
	if err != nil {
		return nil, fmt.Errorf("%s: gradient of b: %w", op.name, err)
	}
	return G.Nodes{dx, dw, db}, nil
}

func (op *conv2dOp) exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error {
	if dt == tensor.Float32 {
		return convForward(op, in, out.Data().([]float32))
	}
	return convForward(op, in, out.Data().([]float64))
}

// convRowsOff, when true, sends every convolution forward product to the BLAS: for the
// benchmarks that compare simd.GemmRows32 with it in one process.
var convRowsOff atomic.Bool

// convRows reports whether a float32 convolution forward's product w (m×k)·cols (k×n) runs
// on simd.GemmRows32 (simd.GemmRowsConvFits: 64 output pixels per product, at least 512
// rows of cols) rather than the BLAS.
func convRows(m, n, k int) bool { return !convRowsOff.Load() && simd.GemmRowsConvFits(m, n, k) }

// convRowsGemm computes c (m×n) = a (m×k)·b (k×n) with simd.GemmRows32 when T is float32
// and convRows takes the shape, and reports whether it did: on one thread, or split across
// Threads() by rows of c when par (the caller's worker owns the machine, as the BLAS call it
// replaces would; the rows' sums do not depend on the split).
func convRowsGemm[T Float](par bool, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) bool {
	if par {
		return gemmRowsIf(convRows(m, n, k), false, m, n, k, a, lda, b, ldb, nil, c, ldc)
	}
	a32, ok := any(a).([]float32)
	return ok && convRows(m, n, k) &&
		simd.GemmRows32(false, m, n, k, a32, lda, any(b).([]float32), ldb, nil, any(c).([]float32), ldc)
}

func convForward[T Float](op *conv2dOp, in []G.Value, y []T) error {
	g := &op.g
	x, err := kernData[T](op.name, in[0], "x", op.n*g.C*g.H*g.W)
	if err != nil {
		return err
	}
	Cg, Og := g.C/g.Groups, g.Out/g.Groups
	Kg, P := Cg*g.KH*g.KW, g.OH*g.OW
	w, err := kernData[T](op.name, in[1], "w", g.Out*Kg)
	if err != nil {
		return err
	}
	var b []T
	if op.arity == 3 {
		if b, err = kernData[T](op.name, in[2], "b", g.Out); err != nil {
			return err
		}
	}
	if x32, ok := any(x).([]float32); ok && convImplicit(g) &&
		convShiftForward(op, x32, any(w).([]float32), any(b).([]float32), any(y).([]float32)) {
		return nil
	}
	if x32, ok := any(x).([]float32); ok && convGather(g) &&
		convGatherForward(op, x32, any(w).([]float32), any(b).([]float32), any(y).([]float32)) {
		return nil
	}
	if nb := g.batchChunk(op.n, elemSize[T]()); nb > 0 {
		convForwardBatched(op, nb, x, w, b, y)
		return nil
	}
	// Kept columns are laid out as the batched path's, [C*kh*kw, N*Ho*Wo], so that the filter
	// gradient is one GEMM over the whole batch (see convFilterGrad).
	chw, ldk := g.C*g.H*g.W, op.n*P
	kept := convKeepBuf[T](g, op.sc, op.n)
	convImages(g, op.sc, op.n, kept == nil, func(_, lo, hi int, col []T, par bool) {
		for n := lo; n < hi; n++ {
			yn := y[n*g.Out*P : (n+1)*g.Out*P]
			var beta T
			if b != nil {
				for o, bo := range b {
					row := yn[o*P : (o+1)*P]
					for i := range row {
						row[i] = bo
					}
				}
				beta = 1
			}
			src, ld := x[n*chw:(n+1)*chw], P
			switch {
			case kept != nil:
				src, ld = kept[n*P:], ldk
				convIm2colOne(g, op.sc, x[n*chw:(n+1)*chw], src, ld, par)
			case !g.directCols:
				convIm2colOne(g, op.sc, src, col, P, par)
				src = col
			}
			for gr := 0; gr < g.Groups; gr++ {
				if beta == 0 && convRowsGemm(par, Og, P, Kg, w[gr*Og*Kg:], Kg, src[gr*Kg*ld:], ld, yn[gr*Og*P:], P) {
					continue
				}
				gemm(false, false, Og, P, Kg, 1, w[gr*Og*Kg:], Kg, src[gr*Kg*ld:], ld, beta, yn[gr*Og*P:], P)
			}
		}
	})
	if kept != nil {
		op.sc.keepX = x
	}
	return nil
}
