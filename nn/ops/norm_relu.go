package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BatchNormReLU is ReLU(BatchNorm2d(x, gamma, beta, st)) as one op, with the same results
// bit for bit as the two ops (the ReLU is ops.ReLU's, applied to each row of the
// normalised output while it is in the cache; the gradient is BatchNorm's backward of dy
// masked by the output's sign, as ReLU's gradient masks it, the mask applied as the
// backward's sums and its apply pass read dy for float32, by a masking pass first for
// float64). It saves a pass over the activation and its memory in the forward and in the
// backward: ResNet applies it after all but the last BatchNorm of every block.
func BatchNormReLU(x, gamma, beta *G.Node, st *BNState) (*G.Node, error) {
	return batchNorm("BatchNormReLU", x, gamma, beta, st, true)
}

// AddReLU is ReLU(Add(a, b)) for a and b of one shape (ResNet's residual join), as one op:
// the sum is rectified while in the cache, and the gradient of both inputs is dy masked by
// the output's sign, the same values as ReLU's gradient after Add's.
func AddReLU(a, b *G.Node) (*G.Node, error) {
	const name = "AddReLU"
	if _, err := sameDtype(name, a, b); err != nil {
		return nil, err
	}
	as, bs := a.Shape(), b.Shape()
	if !as.Eq(bs) || as.IsScalar() {
		return nil, fmt.Errorf("%s: shapes %v and %v, want one non-scalar shape", name, as, bs)
	}
	y, err := G.ApplyOp(&addReLUOp{nop: newNop(name), shape: as.Clone()}, a, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v + %v: %w", name, as, bs, err)
	}
	return y, nil
}

type addReLUOp struct {
	nop
	shape tensor.Shape
	out   *tensor.Dense
}

func (op *addReLUOp) Arity() int { return 2 }
func (op *addReLUOp) Type() hm.Type {
	d := op.shape.Dims()
	return fnT(d, d, d)
}
func (op *addReLUOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 2); err != nil {
		return nil, err
	}
	return op.shape.Clone(), nil
}

func (op *addReLUOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 2); err != nil {
		return nil, err
	}
	a, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	b, err := denseIn(op.name, in[1])
	if err != nil {
		return nil, err
	}
	if !a.Shape().Eq(op.shape) || !b.Shape().Eq(op.shape) || a.Dtype() != b.Dtype() {
		return nil, fmt.Errorf("%s: inputs %v %v + %v %v, built for %v", op.name, a.Shape(), a.Dtype(), b.Shape(), b.Dtype(), op.shape)
	}
	out := ownedOut(&op.out, a.Dtype(), op.shape)
	if a.Dtype() == tensor.Float32 {
		addReLU(flat[float32](a), flat[float32](b), flat[float32](out))
	} else {
		addReLU(flat[float64](a), flat[float64](b), flat[float64](out))
	}
	return out, nil
}

func (op *addReLUOp) DiffWRT(int) []bool { return []bool{true, true} }

// SymDiff: both gradients are dy where the output is positive, ReLU's gradient op with the
// output as its selector (the output is positive exactly where the sum is).
func (op *addReLUOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	g := &unaryGradOp{nop: newNop(op.name + "Grad"), kind: actReLU, dims: op.shape.Dims()}
	d, err := G.ApplyOp(g, out, grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{d, d}, nil
}

// addReLU sets y = ReLU(a + b) (ops.ReLU's bits), in chunks split across threads.
func addReLU[T Float](a, b, y []T) {
	b, y = b[:len(a)], y[:len(a)]
	splitRun(len(a), func(lo, hi int) {
		const blk = 1024 // rectified while in the L1 cache
		for i := lo; i < hi; i += blk {
			e := min(i+blk, hi)
			s, t, d := a[i:e], b[i:e], y[i:e]
			if ds, ok := any(d).([]float32); !ok || !simdAdd(any(s).([]float32), any(t).([]float32), ds) {
				for j := range d {
					d[j] = s[j] + t[j]
				}
			}
			reluRow(d)
		}
	})
}

// reluSel returns the forward's float32 output yv as ReLU's selector for bnGradSums and
// bnGradApply, which mask dy as they read it (one pass over dy and no masked copy), or nil
// for float64, whose dy reluMask masks first.
func (op *bnGradOp) reluSel(yv G.Value, dy *tensor.Dense) ([]float32, error) {
	if dy.Dtype() != tensor.Float32 {
		return nil, nil
	}
	y, err := denseIn(op.name, yv)
	if err != nil {
		return nil, err
	}
	if !y.Shape().Eq(op.fwd.shape) || y.Dtype() != dy.Dtype() {
		return nil, fmt.Errorf("%s: y %v %v, built for %v %v", op.name, y.Shape(), y.Dtype(), op.fwd.shape, dy.Dtype())
	}
	return flat[float32](y), nil
}

// reluMask returns dy where the forward's output yv is positive and 0 elsewhere, in the
// op's own buffer: BatchNormReLU's backward through its ReLU.
func (op *bnGradOp) reluMask(yv G.Value, dy *tensor.Dense) (*tensor.Dense, error) {
	y, err := denseIn(op.name, yv)
	if err != nil {
		return nil, err
	}
	if !y.Shape().Eq(op.fwd.shape) || y.Dtype() != dy.Dtype() {
		return nil, fmt.Errorf("%s: y %v %v, built for %v %v", op.name, y.Shape(), y.Dtype(), op.fwd.shape, dy.Dtype())
	}
	m := ownedOut(&op.masked, dy.Dtype(), op.fwd.shape)
	if dy.Dtype() == tensor.Float32 {
		unaryBwd(actReLU, flat[float32](y), flat[float32](dy), flat[float32](m))
	} else {
		unaryBwd(actReLU, flat[float64](y), flat[float64](dy), flat[float64](m))
	}
	return m, nil
}
