package swin

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gatherRows returns a tensor of shape out whose i-th row of rowLen elements is row idx[i]
// of x (viewed as rows of rowLen elements), or zeros where idx[i] < 0. One such gather does
// Swin's padding, cyclic shift and window partition in a single pass (and, with another
// index, the reverse, cropping and PatchMerging's strided concatenation). Its gradient is
// the matching scatter-add. x and out are row-major; float32 or float64.
func gatherRows(x *G.Node, idx []int32, rowLen int, out tensor.Shape) (*G.Node, error) {
	in := x.Shape().Clone()
	if rowLen <= 0 || in.TotalSize()%rowLen != 0 || out.TotalSize() != len(idx)*rowLen {
		return nil, fmt.Errorf("gatherRows: input %v, %d rows of %d elements, output %v do not agree", in, len(idx), rowLen, out)
	}
	rows := int32(in.TotalSize() / rowLen)
	for i, j := range idx {
		if j >= rows {
			return nil, fmt.Errorf("gatherRows: index %d is row %d of an input with %d rows (%v)", i, j, rows, in)
		}
	}
	op := &gatherOp{opBase: newOpBase("GatherRows"), idx: idx, row: rowLen, in: in, out: out.Clone(), unhit: unhitRows(idx, int(rows))}
	y, err := G.ApplyOp(op, x)
	if err != nil {
		return nil, fmt.Errorf("gatherRows %v -> %v: %w", in, out, err)
	}
	return y, nil
}

// gatherOp is gatherRows's op; scatter selects the transposed op (dx from dy).
type gatherOp struct {
	opBase
	idx     []int32
	row     int
	in, out tensor.Shape
	scatter bool
	buf     outBuf
	// unhit lists the input rows that no index names, when no row is named twice (Swin's
	// maps): the scatter then copies rows and zeroes these; nil when some row is named twice,
	// and the scatter adds.
	unhit []int32
}

// unhitRows returns the rows of [0, rows) that idx does not name (an empty, non-nil slice
// when it names them all), or nil when idx names some row twice.
func unhitRows(idx []int32, rows int) []int32 {
	seen := make([]bool, rows)
	for _, j := range idx {
		if j < 0 {
			continue
		}
		if seen[j] {
			return nil
		}
		seen[j] = true
	}
	unhit := []int32{}
	for j, ok := range seen {
		if !ok {
			unhit = append(unhit, int32(j))
		}
	}
	return unhit
}

func (op *gatherOp) Arity() int { return 1 }
func (op *gatherOp) Type() hm.Type {
	if op.scatter {
		return fnType(op.in.Dims(), op.out.Dims())
	}
	return fnType(op.out.Dims(), op.in.Dims())
}

func (op *gatherOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if op.scatter {
		return op.in.Clone(), nil
	}
	return op.out.Clone(), nil
}

func (op *gatherOp) Do(vals ...G.Value) (G.Value, error) {
	src, dst := op.in, op.out
	if op.scatter {
		src, dst = op.out, op.in
	}
	if len(vals) != 1 {
		return nil, fmt.Errorf("%s: got %d inputs, want 1", op.name, len(vals))
	}
	x, err := dense(op.name, "input", vals[0], src.TotalSize())
	if err != nil {
		return nil, err
	}
	y := op.buf.get(x.Dtype(), dst)
	if x.Dtype() == tensor.Float32 {
		gatherRun(op, data[float32](x), data[float32](y))
	} else {
		gatherRun(op, data[float64](x), data[float64](y))
	}
	return y, nil
}

func gatherRun[T float](op *gatherOp, x, y []T) {
	r := op.row
	if !op.scatter {
		parallel(len(op.idx), func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				d := y[i*r : (i+1)*r]
				if j := int(op.idx[i]); j >= 0 {
					copy(d, x[j*r:(j+1)*r])
				} else {
					clear(d)
				}
			}
		})
		return
	}
	if op.unhit != nil {
		// Each row of y receives at most one row of x: copy, and zero the rows none names.
		parallel(len(op.idx), func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				if j := int(op.idx[i]); j >= 0 {
					copy(y[j*r:(j+1)*r], x[i*r:(i+1)*r])
				}
			}
		})
		for _, j := range op.unhit {
			clear(y[int(j)*r : (int(j)+1)*r])
		}
		return
	}
	// Scatter-add: rows of y may receive several rows of x, so it runs serially.
	clear(y)
	for i, j := range op.idx {
		if j < 0 {
			continue
		}
		d, s := y[int(j)*r:(int(j)+1)*r], x[i*r:(i+1)*r]
		for k := range d {
			d[k] += s[k]
		}
	}
}

func (op *gatherOp) DiffWRT(int) []bool { return []bool{true} }

func (op *gatherOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	t := &gatherOp{opBase: newOpBase(op.name + "Grad"), idx: op.idx, row: op.row, in: op.in, out: op.out, scatter: !op.scatter, unhit: op.unhit}
	dx, err := G.ApplyOp(t, grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx}, nil
}
