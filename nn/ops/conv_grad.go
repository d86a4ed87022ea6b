package ops

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// convDataGradOp is the gradient of Conv2d with respect to x: inputs w and dy, output dx.
type convDataGradOp struct {
	kernBase
	g  convGeom
	n  int
	sc *convScratch
}

func (op *convDataGradOp) outShape() tensor.Shape {
	return tensor.Shape{op.n, op.g.C, op.g.H, op.g.W}
}

// Type is (w: 4-D, dy: 4-D) -> 4-D.
func (op *convDataGradOp) Type() hm.Type {
	t4 := G.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t4, t4, t4)
}

// InferShape returns x's shape.
func (op *convDataGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.outShape(), nil }

// Do computes dx into the op's own output tensor.
func (op *convDataGradOp) Do(in ...G.Value) (G.Value, error) { return kernDo(op, &op.kernBase, in) }

// UsePreallocDo computes dx into the op's reused output (see kernPrealloc).
func (op *convDataGradOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	return kernPrealloc(op, &op.kernBase, p, in)
}

// WriteHash writes the op's identity.
func (op *convDataGradOp) WriteHash(h hash.Hash) { kernHash(h, &op.kernBase, op.g) }

// Hashcode hashes WriteHash.
func (op *convDataGradOp) Hashcode() uint32 { return HashOf(op) }
func (op *convDataGradOp) String() string   { return "Conv2dGradX" }

func (op *convDataGradOp) exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error {
	if dt == tensor.Float32 {
		return convDataGrad(op, in, out.Data().([]float32))
	}
	return convDataGrad(op, in, out.Data().([]float64))
}

func convDataGrad[T Float](op *convDataGradOp, in []G.Value, dx []T) error {
	g := &op.g
	Cg, Og := g.C/g.Groups, g.Out/g.Groups
	Kg, P := Cg*g.KH*g.KW, g.OH*g.OW
	w, err := kernData[T](op.name, in[0], "w", g.Out*Kg)
	if err != nil {
		return err
	}
	dy, err := kernData[T](op.name, in[1], "dy", op.n*g.Out*P)
	if err != nil {
		return err
	}
	if w32, ok := any(w).([]float32); ok && convImplicit(g) &&
		convShiftDataGrad(op, w32, any(dy).([]float32), any(dx).([]float32)) {
		return nil
	}
	if nb := g.batchChunk(op.n, elemSize[T]()); nb > 0 {
		convDataGradBatched(op, nb, w, dy, dx)
		return nil
	}
	chw := g.C * g.H * g.W
	convImages(g, op.sc, op.n, true, func(_, lo, hi int, col []T, par bool) {
		for n := lo; n < hi; n++ {
			dyn := dy[n*g.Out*P:]
			dxn := dx[n*chw : (n+1)*chw]
			dst := col
			if g.directCols {
				dst = dxn
			}
			for gr := 0; gr < g.Groups; gr++ {
				gemm(true, false, Kg, P, Og, 1, w[gr*Og*Kg:], Kg, dyn[gr*Og*P:], P, 0, dst[gr*Kg*P:], P)
			}
			if !g.directCols {
				convCol2imOne(g, op.sc, col, dxn, par)
			}
		}
	})
	return nil
}

// convFilterGradOp is the gradient of Conv2d with respect to w: inputs x and dy, output dw.
type convFilterGradOp struct {
	kernBase
	g  convGeom
	n  int
	sc *convScratch
}

func (op *convFilterGradOp) outShape() tensor.Shape {
	return tensor.Shape{op.g.Out, op.g.C / op.g.Groups, op.g.KH, op.g.KW}
}

// Type is (x: 4-D, dy: 4-D) -> 4-D.
func (op *convFilterGradOp) Type() hm.Type {
	t4 := G.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t4, t4, t4)
}

// InferShape returns w's shape.
func (op *convFilterGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.outShape(), nil
}

// Do computes dw into the op's own output tensor.
func (op *convFilterGradOp) Do(in ...G.Value) (G.Value, error) { return kernDo(op, &op.kernBase, in) }

// UsePreallocDo computes dw into the op's reused output (see kernPrealloc).
func (op *convFilterGradOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	return kernPrealloc(op, &op.kernBase, p, in)
}

// WriteHash writes the op's identity.
func (op *convFilterGradOp) WriteHash(h hash.Hash) { kernHash(h, &op.kernBase, op.g) }

// Hashcode hashes WriteHash.
func (op *convFilterGradOp) Hashcode() uint32 { return HashOf(op) }
func (op *convFilterGradOp) String() string   { return "Conv2dGradW" }

func (op *convFilterGradOp) exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error {
	if dt == tensor.Float32 {
		return convFilterGrad(op, in, out.Data().([]float32))
	}
	return convFilterGrad(op, in, out.Data().([]float64))
}

func convFilterGrad[T Float](op *convFilterGradOp, in []G.Value, dw []T) error {
	g := &op.g
	Cg, Og := g.C/g.Groups, g.Out/g.Groups
	Kg, P := Cg*g.KH*g.KW, g.OH*g.OW
	x, err := kernData[T](op.name, in[0], "x", op.n*g.C*g.H*g.W)
	if err != nil {
		return err
	}
	dy, err := kernData[T](op.name, in[1], "dy", op.n*g.Out*P)
	if err != nil {
		return err
	}
	if x32, ok := any(x).([]float32); ok && convImplicit(g) &&
		convShiftFilterGrad(op, x32, any(dy).([]float32), any(dw).([]float32)) {
		return nil
	}
	if nb := g.batchChunk(op.n, elemSize[T]()); nb > 0 {
		convFilterGradBatched(op, nb, x, dy, dw)
		return nil
	}
	if kept := convKept(g, op.sc, op.n, x); kept != nil {
		// The forward kept the batch's columns side by side: dw = dy·colsᵀ is one GEMM
		// with the batch in its inner dimension, instead of one per image accumulating.
		ld := op.n * P
		mat := gemmScratchOf[T](&op.sc.mat, g.Out*ld)
		gatherDy(dy, mat, 0, op.n, g.Out, P)
		for gr := 0; gr < g.Groups; gr++ {
			gemmABt(&op.sc.tr, Og, Kg, ld, mat[gr*Og*ld:], ld, kept[gr*Kg*ld:], ld, dw[gr*Og*Kg:], Kg)
		}
		return nil
	}
	chw := g.C * g.H * g.W
	w := convImageWorkers(op.n)
	// Worker 0 accumulates into dw, the others into their own partial sums, added at the end.
	parts := append([][]T{dw}, workerBufs[T](&op.sc.dws, w, len(dw))[1:]...)
	convImages(g, op.sc, op.n, true, func(wi, lo, hi int, col []T, par bool) {
		acc := parts[wi]
		for n := lo; n < hi; n++ {
			var beta T
			if n > lo {
				beta = 1
			}
			dyn := dy[n*g.Out*P:]
			src := x[n*chw : (n+1)*chw]
			if !g.directCols {
				convIm2colOne(g, op.sc, src, col, P, par)
				src = col
			}
			for gr := 0; gr < g.Groups; gr++ {
				gemm(false, true, Og, Kg, P, 1, dyn[gr*Og*P:], P, src[gr*Kg*P:], P, beta, acc[gr*Og*Kg:], Kg)
			}
		}
	})
	if len(parts) > 1 {
		splitRun(len(dw), func(lo, hi int) {
			for _, p := range parts[1:] {
				d, s := dw[lo:hi], p[lo:hi]
				for i := range d {
					d[i] += s[i]
				}
			}
		})
	}
	return nil
}

// biasGradOp sums dy, viewed as [n, c, inner], over n and inner: the gradient of a bias
// added along axis 1 (conv: [N, O, Ho*Wo]; linear: [rows, out, 1]).
type biasGradOp struct {
	kernBase
	n, c, inner int
	dims        int // rank of dy
}

func (op *biasGradOp) outShape() tensor.Shape { return tensor.Shape{op.c} }

// Type is (dy: dims-D) -> 1-D.
func (op *biasGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(G.TensorType{Dims: op.dims, Of: a}, G.TensorType{Dims: 1, Of: a})
}

// InferShape returns [c].
func (op *biasGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.outShape(), nil }

// Do computes db into the op's own output tensor.
func (op *biasGradOp) Do(in ...G.Value) (G.Value, error) { return kernDo(op, &op.kernBase, in) }

// UsePreallocDo computes db into the op's reused output (see kernPrealloc).
func (op *biasGradOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	return kernPrealloc(op, &op.kernBase, p, in)
}

// WriteHash writes the op's identity.
func (op *biasGradOp) WriteHash(h hash.Hash) {
	kernHash(h, &op.kernBase, [4]int{op.n, op.c, op.inner, op.dims})
}

// Hashcode hashes WriteHash.
func (op *biasGradOp) Hashcode() uint32 { return HashOf(op) }
func (op *biasGradOp) String() string   { return fmt.Sprintf("BiasGrad{%d}", op.c) }

func (op *biasGradOp) exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error {
	if dt == tensor.Float32 {
		return biasGrad(op, in, out.Data().([]float32))
	}
	return biasGrad(op, in, out.Data().([]float64))
}

func biasGrad[T Float](op *biasGradOp, in []G.Value, db []T) error {
	dy, err := kernData[T](op.name, in[0], "dy", op.n*op.c*op.inner)
	if err != nil {
		return err
	}
	if op.inner == 1 && op.c >= simdMinLen && simdOK() {
		if d32, ok := any(dy).([]float32); ok && simdColSums(d32, op.n, op.c, any(db).([]float32)) {
			return nil
		}
	}
	clear(db)
	if op.inner == 1 {
		for r := 0; r < op.n; r++ {
			row := dy[r*op.c : (r+1)*op.c]
			for o, v := range row {
				db[o] += v
			}
		}
		return nil
	}
	for r := 0; r < op.n; r++ {
		for o := 0; o < op.c; o++ {
			var s T
			for _, v := range dy[(r*op.c+o)*op.inner : (r*op.c+o+1)*op.inner] {
				s += v
			}
			db[o] += s
		}
	}
	return nil
}

// gemmABtRows is the fewest rows of op(b) (relative to op(a)'s) and the shortest inner
// dimension at which gemmABt computes cᵀ = b·aᵀ and transposes it. Measured with OpenBLAS
// 0.3.21 (SkylakeX kernels) on one thread, resnet18's filter gradients at 64x64, batch 16:
// [64 x 4096]·[576 x 4096]ᵀ 69.5 GFLOP/s, its transpose 88; conv1's [64 x 16384]·[147 x
// 16384]ᵀ 58 and 70; [128 x 1024]·[1152 x 1024]ᵀ 85 and 99; at inner dimension 256 or less
// (layer3, layer4) the two are within 3% or the transpose is slower, as it is when b has
// fewer rows than a.
const gemmABtInner = 1024

// gemmABt computes c (m×n, rows ldc apart) = a·bᵀ for a (m×k) and b (n×k), row-major, with
// gemmPar; when n > m and k >= gemmABtInner it computes cᵀ = b·aᵀ into tr's scratch and
// transposes it into c, the orientation OpenBLAS's kernels run faster for those shapes.
func gemmABt[T Float](tr *gemmScratch, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	if n <= m || k < gemmABtInner {
		gemmPar(false, true, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
		return
	}
	t := gemmScratchOf[T](tr, n*m)
	gemmPar(false, true, n, m, k, 1, b, ldb, a, lda, 0, t, m)
	transposeInto(t, n, m, c, ldc)
}

// transposeInto writes the transpose of t (r×c, dense) into dst (c×r, rows ld apart), in
// 16×16 tiles.
func transposeInto[T Float](t []T, r, c int, dst []T, ld int) {
	const b = 16
	for i0 := 0; i0 < r; i0 += b {
		i1 := min(i0+b, r)
		for j0 := 0; j0 < c; j0 += b {
			j1 := min(j0+b, c)
			for i := i0; i < i1; i++ {
				row := t[i*c : i*c+j1]
				for j := j0; j < j1; j++ {
					dst[j*ld+i] = row[j]
				}
			}
		}
	}
}
