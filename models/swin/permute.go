package swin

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// toNHWC permutes NCHW [B, C, H, W] to channels-last [B, H, W, C] (torchvision's
// Permute([0, 2, 3, 1]) after the patch embedding), into contiguous memory. Its gradient is
// the inverse permutation.
func toNHWC(x *G.Node) (*G.Node, error) {
	s := x.Shape()
	if s.Dims() != 4 {
		return nil, fmt.Errorf("permute: input %v, want [B, C, H, W]", s)
	}
	op := &permuteOp{opBase: newOpBase("ToNHWC"), b: s[0], c: s[1], h: s[2], w: s[3]}
	y, err := G.ApplyOp(op, x)
	if err != nil {
		return nil, fmt.Errorf("permute %v: %w", s, err)
	}
	return y, nil
}

// permuteOp is a batched 2-D transpose [B, C, HW] <-> [B, HW, C]; back selects NHWC to NCHW.
type permuteOp struct {
	opBase
	b, c, h, w int
	back       bool
	buf        outBuf
}

func (op *permuteOp) Arity() int    { return 1 }
func (op *permuteOp) Type() hm.Type { return fnType(4, 4) }
func (op *permuteOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.back {
		return tensor.Shape{op.b, op.c, op.h, op.w}, nil
	}
	return tensor.Shape{op.b, op.h, op.w, op.c}, nil
}

func (op *permuteOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 1 {
		return nil, fmt.Errorf("%s: got %d inputs, want 1", op.name, len(vals))
	}
	x, err := dense(op.name, "input", vals[0], op.b*op.c*op.h*op.w)
	if err != nil {
		return nil, err
	}
	shape, _ := op.InferShape()
	y := op.buf.get(x.Dtype(), shape)
	rows, cols := op.c, op.h*op.w // x is [b, rows, cols]
	if op.back {
		rows, cols = cols, rows
	}
	if x.Dtype() == tensor.Float32 {
		transpose(data[float32](x), data[float32](y), op.b, rows, cols)
	} else {
		transpose(data[float64](x), data[float64](y), op.b, rows, cols)
	}
	return y, nil
}

func transpose[T float](x, y []T, b, rows, cols int) {
	parallel(b, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			xs, ys := x[i*rows*cols:], y[i*rows*cols:]
			for r := range rows {
				for c := range cols {
					ys[c*rows+r] = xs[r*cols+c]
				}
			}
		}
	})
}

func (op *permuteOp) DiffWRT(int) []bool { return []bool{true} }

func (op *permuteOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	t := &permuteOp{opBase: newOpBase(op.name + "Grad"), b: op.b, c: op.c, h: op.h, w: op.w, back: !op.back}
	dx, err := G.ApplyOp(t, grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx}, nil
}
