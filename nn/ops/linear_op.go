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

// Linear is torch.nn.functional.linear: y = x·wᵀ + b, with x [..., in] (any number of leading
// dims, at least one), w [out, in] (torchvision's layout), b [out] or nil; y is [..., out].
// One GEMM forward and one per gradient; the output lives in the op and is reused across runs.
func Linear(x, w, b *G.Node) (*G.Node, error) {
	const name = "ops.Linear"
	nodes := []*G.Node{x, w}
	if b != nil {
		nodes = append(nodes, b)
	}
	if err := kernCheckFloat(name, nodes...); err != nil {
		return nil, err
	}
	xs, ws := x.Shape(), w.Shape()
	if xs.Dims() < 1 || ws.Dims() != 2 {
		return nil, fmt.Errorf("%s: x %v must have rank >= 1 and w %v rank 2 ([out, in])", name, xs, ws)
	}
	in, out := ws[1], ws[0]
	if xs[xs.Dims()-1] != in {
		return nil, fmt.Errorf("%s: x %v has %d features in its last dim, w %v expects %d", name, xs, xs[xs.Dims()-1], ws, in)
	}
	if b != nil {
		if bs := b.Shape(); bs.Dims() != 1 || bs[0] != out {
			return nil, fmt.Errorf("%s: bias %v, want [%d] for w %v", name, bs, out, ws)
		}
	}
	rows := xs.TotalSize() / in
	if rows < 1 || in < 1 || out < 1 {
		return nil, fmt.Errorf("%s: x %v, w %v: empty", name, xs, ws)
	}
	ys := xs.Clone()
	ys[ys.Dims()-1] = out
	op := &linearOp{kernBase: newKernBase(name, len(nodes)), xs: xs.Clone(), ys: ys, rows: rows, in: in, out: out}
	y, err := G.ApplyOp(op, nodes...)
	if err != nil {
		return nil, fmt.Errorf("%s: x %v, w %v: %w", name, xs, ws, err)
	}
	return y, nil
}

// linearOp is y = x·wᵀ (+ b); inputs x, w[, b].
type linearOp struct {
	kernBase
	xs, ys        tensor.Shape
	rows, in, out int
}

func (op *linearOp) outShape() tensor.Shape { return op.ys }

// Type is (x: d-D, w: 2-D[, b: 1-D]) -> d-D.
func (op *linearOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	tx := G.TensorType{Dims: op.xs.Dims(), Of: a}
	tw := G.TensorType{Dims: 2, Of: a}
	if op.arity == 3 {
		return hm.NewFnType(tx, tw, G.TensorType{Dims: 1, Of: a}, tx)
	}
	return hm.NewFnType(tx, tw, tx)
}

// InferShape returns [..., out].
func (op *linearOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.ys.Clone(), nil }

// Do computes y into the op's own output tensor.
func (op *linearOp) Do(in ...G.Value) (G.Value, error) { return kernDo(op, &op.kernBase, in) }

// UsePreallocDo computes y into the op's reused output (see kernPrealloc).
func (op *linearOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	return kernPrealloc(op, &op.kernBase, p, in)
}

// WriteHash writes the op's identity.
func (op *linearOp) WriteHash(h hash.Hash) { kernHash(h, &op.kernBase, op.xs) }

// Hashcode hashes WriteHash.
func (op *linearOp) Hashcode() uint32 { return HashOf(op) }
func (op *linearOp) String() string   { return fmt.Sprintf("Linear{%d->%d}", op.in, op.out) }

// DiffWRT: differentiable with respect to every input.
func (op *linearOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

// SymDiff returns the gradient nodes for x, w (and b).
func (op *linearOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	dx, err := G.ApplyOp(&linearGradOp{kernBase: newKernBase("ops.Linear.grad_x", 2), fwd: op, wrtW: false}, inputs[1], grad)
	if err != nil {
		return nil, fmt.Errorf("%s: gradient of x: %w", op.name, err)
	}
	dw, err := G.ApplyOp(&linearGradOp{kernBase: newKernBase("ops.Linear.grad_w", 2), fwd: op, wrtW: true}, inputs[0], grad)
	if err != nil {
		return nil, fmt.Errorf("%s: gradient of w: %w", op.name, err)
	}
	if op.arity == 2 {
		return G.Nodes{dx, dw}, nil
	}
	db, err := G.ApplyOp(&biasGradOp{kernBase: newKernBase("ops.Linear.grad_b", 1), n: op.rows, c: op.out, inner: 1, dims: op.ys.Dims()}, grad)
	if err != nil {
		return nil, fmt.Errorf("%s: gradient of b: %w", op.name, err)
	}
	return G.Nodes{dx, dw, db}, nil
}

func (op *linearOp) exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error {
	if dt == tensor.Float32 {
		return linearForward(op, in, out.Data().([]float32))
	}
	return linearForward(op, in, out.Data().([]float64))
}

func linearForward[T Float](op *linearOp, in []G.Value, y []T) error {
	x, err := kernData[T](op.name, in[0], "x", op.rows*op.in)
	if err != nil {
		return err
	}
	w, err := kernData[T](op.name, in[1], "w", op.out*op.in)
	if err != nil {
		return err
	}
	var beta T
	if op.arity == 3 {
		b, err := kernData[T](op.name, in[2], "b", op.out)
		if err != nil {
			return err
		}
		if gemmRows(true, op.rows, op.out, op.in, x, op.in, w, op.in, b, y, op.out) {
			return nil
		}
		for r := 0; r < op.rows; r++ {
			copy(y[r*op.out:(r+1)*op.out], b)
		}
		beta = 1
	} else if gemmRows(true, op.rows, op.out, op.in, x, op.in, w, op.in, nil, y, op.out) {
		return nil
	}
	gemmPar(false, true, op.rows, op.out, op.in, 1, x, op.in, w, op.in, beta, y, op.out)
	return nil
}

// linearGradOp is the gradient of Linear with respect to x (inputs w, dy: dx = dy·w) or
// to w (inputs x, dy: dw = dyᵀ·x).
type linearGradOp struct {
	kernBase
	fwd  *linearOp
	wrtW bool
	wt   gemmScratch // wᵀ for the data gradient's transposed-weight product (gemmRowsWT)
}

func (op *linearGradOp) outShape() tensor.Shape {
	if op.wrtW {
		return tensor.Shape{op.fwd.out, op.fwd.in}
	}
	return op.fwd.xs
}

// Type is (w or x, dy) -> dx or dw.
func (op *linearGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	tx := G.TensorType{Dims: op.fwd.xs.Dims(), Of: a}
	tw := G.TensorType{Dims: 2, Of: a}
	if op.wrtW {
		return hm.NewFnType(tx, tx, tw)
	}
	return hm.NewFnType(tw, tx, tx)
}

// InferShape returns x's or w's shape.
func (op *linearGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.outShape().Clone(), nil
}

// Do computes the gradient into the op's own output tensor.
func (op *linearGradOp) Do(in ...G.Value) (G.Value, error) { return kernDo(op, &op.kernBase, in) }

// UsePreallocDo computes the gradient into the op's reused output (see kernPrealloc).
func (op *linearGradOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	return kernPrealloc(op, &op.kernBase, p, in)
}

// WriteHash writes the op's identity.
func (op *linearGradOp) WriteHash(h hash.Hash) { kernHash(h, &op.kernBase, op.fwd.xs) }

// Hashcode hashes WriteHash.
func (op *linearGradOp) Hashcode() uint32 { return HashOf(op) }
func (op *linearGradOp) String() string   { return op.name }

func (op *linearGradOp) exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error {
	if dt == tensor.Float32 {
		return linearGrad(op, in, out.Data().([]float32))
	}
	return linearGrad(op, in, out.Data().([]float64))
}

func linearGrad[T Float](op *linearGradOp, in []G.Value, dst []T) error {
	f := op.fwd
	dy, err := kernData[T](op.name, in[1], "dy", f.rows*f.out)
	if err != nil {
		return err
	}
	if op.wrtW {
		x, err := kernData[T](op.name, in[0], "x", f.rows*f.in)
		if err != nil {
			return err
		}
		// Under ownGEMM gemmPar reaches simd.GemmDW32 too, through gemm, for every shape it
		// can compute: the same split, the same bits.
		if linearDWOff.Load() || !simd.GemmDWFits(f.out, f.in, f.rows) || !gemmDW(f.out, f.in, f.rows, dy, f.out, x, f.in, dst, f.in) {
			gemmPar(true, false, f.out, f.in, f.rows, 1, dy, f.out, x, f.in, 0, dst, f.in)
		}
		return nil
	}
	w, err := kernData[T](op.name, in[0], "w", f.out*f.in)
	if err != nil {
		return err
	}
	if !gemmRows(false, f.rows, f.in, f.out, dy, f.out, w, f.in, nil, dst, f.in) &&
		!gemmRowsWT(&op.wt, f.rows, f.in, f.out, dy, w, dst) {
		gemmPar(false, false, f.rows, f.in, f.out, 1, dy, f.out, w, f.in, 0, dst, f.in)
	}
	return nil
}

// gemmRowsWT computes a linear layer's data gradient dx (rows×in) = dy (rows×out)·w
// (out×in), all dense, as dy·(wᵀ)ᵀ with simd.GemmRows32's transposed-b path over wᵀ
// written into wt, where GemmRowsFits takes that form and not the untransposed one (its
// untransposed b is bounded to k at most 384, its transposed one to 768): swin_t's second
// stage's qkv and fc1 (6272 rows, out 576 and 768, in 192), measured 1.10x to 1.13x faster
// than OpenBLAS at one thread with the transpose included (the untransposed kernel ran
// 0.65x there). It reports false, computing nothing, for float64 or a shape or level it
// does not take: the caller then runs gemmPar.
func gemmRowsWT[T Float](wt *gemmScratch, rows, in, out int, dy, w, dst []T) bool {
	if _, ok := any(w).([]float32); !ok || !simd.GemmRowsFits(true, rows, in, out) {
		return false
	}
	t := gemmScratchOf[T](wt, out*in)
	transposeInto(w, out, in, t, out)
	return gemmRowsIf(true, true, rows, in, out, dy, out, t, out, nil, dst, in)
}

// gemmRows computes c = a·op(b) (+ bias on every row, bias nil for none) with
// simd.GemmRows32 when it takes the shape (float32 at level AVX512: the tall narrow products
// of a transformer's first two stages, see simd.GemmRowsFits; under ownGEMM every product of
// at least ownGemmMinCols columns, the bias in the kernel's epilogue rather than in a pass
// over c before gemmPar), split into row blocks across Threads() as gemmPar splits them. It
// reports false, computing nothing, otherwise: the caller then runs gemmPar.
func gemmRows[T Float](tB bool, m, n, k int, a []T, lda int, b []T, ldb int, bias, c []T, ldc int) bool {
	fits := simd.GemmRowsFits(tB, m, n, k) || ownGEMM() && n >= ownGemmMinCols && simd.GemmRowsTakes(n, k)
	return gemmRowsIf(fits, tB, m, n, k, a, lda, b, ldb, bias, c, ldc)
}

// gemmRowsIf is gemmRows for a shape whose fit the caller has asked simd for (fits: a
// convolution's forward asks simd.GemmRowsConvFits).
func gemmRowsIf[T Float](fits, tB bool, m, n, k int, a []T, lda int, b []T, ldb int, bias, c []T, ldc int) bool {
	a32, ok := any(a).([]float32)
	if !ok || !fits {
		return false
	}
	b32, c32 := any(b).([]float32), any(c).([]float32)
	var bias32 []float32
	if bias != nil {
		bias32 = any(bias).([]float32)
	}
	w := max(1, min(threads(), m*n*k/gemmGrain, m/16))
	// A worker's kernel that could not allocate its packing buffer makes the caller do it all
	// again with the BLAS.
	return splitWorkersOK(m, w, 16, func(lo, hi int) bool {
		return simd.GemmRows32(tB, hi-lo, n, k, a32[lo*lda:], lda, b32, ldb, bias32, c32[lo*ldc:], ldc)
	})
}

// linearDWOff, when true, sends every weight gradient to gemmPar: for the benchmarks that
// compare simd.GemmDW32 with the BLAS in one process.
var linearDWOff atomic.Bool

// gemmDW computes a linear layer's weight gradient c (m×n) = aᵀ·b (a k×m, b k×n, float32)
// with simd.GemmDW32, c split across Threads() into blocks of rows when it is taller than
// wide, else of columns (multiples of 16), so that each worker packs all of the narrower of
// a and b again rather than of the wider (the kernel's sums do not depend on the split, so
// the bits do not depend on the threads). It reports false, computing nothing, for float64
// or a shape or level the kernel does not take: the caller then runs gemmPar.
func gemmDW[T Float](m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) bool {
	a32, ok := any(a).([]float32)
	if !ok {
		return false
	}
	b32, c32 := any(b).([]float32), any(c).([]float32)
	rows := m > n
	w := max(1, min(threads(), m*n*k/gemmGrain, max(m, n)/16))
	// A worker's kernel that refused (its packing buffer, or the level) makes the caller do it
	// all again with the BLAS.
	return splitWorkersOK(max(m, n), w, 16, func(lo, hi int) bool {
		if rows {
			return simd.GemmDW32(hi-lo, n, k, a32[lo:], lda, b32, ldb, c32[lo*ldc:], ldc)
		}
		return simd.GemmDW32(m, hi-lo, k, a32, lda, b32[lo:], ldb, c32[lo:], ldc)
	})
}
