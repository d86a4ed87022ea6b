package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Sum returns the sum of x over the given axes (negative counts from the end), which are
// removed from the shape; with no axes it sums everything into a scalar. Unlike gorgonia
// v0.9.18's Sum, any axes are correct, middle ones included. Sums accumulate in float64.
func Sum(x *G.Node, axes ...int) (*G.Node, error) { return reduceNode("Sum", x, false, axes) }

// Mean returns the mean of x over the given axes (all axes, to a scalar, when none are given).
func Mean(x *G.Node, axes ...int) (*G.Node, error) { return reduceNode("Mean", x, true, axes) }

func reduceNode(name string, x *G.Node, mean bool, axes []int) (*G.Node, error) {
	if _, err := nodeDtype(name, x); err != nil {
		return nil, err
	}
	shape := x.Shape()
	nd := shape.Dims()
	red := make([]bool, nd)
	if len(axes) == 0 {
		for i := range red {
			red[i] = true
		}
	}
	for _, a := range axes {
		ax := a
		if ax < 0 {
			ax += nd
		}
		if ax < 0 || ax >= nd {
			return nil, fmt.Errorf("%s: axis %d out of range for shape %v", name, a, shape)
		}
		if red[ax] {
			return nil, fmt.Errorf("%s: axis %d given twice for shape %v", name, a, shape)
		}
		red[ax] = true
	}
	op := &reduceOp{nop: newNop(name), mean: mean, in: shape.Clone(), red: red}
	op.out = keptShape(shape, red)
	y, err := G.ApplyOp(op, x)
	if err != nil {
		return nil, fmt.Errorf("%s: %v over axes %v: %w", name, shape, axes, err)
	}
	return y, nil
}

// keptShape is shape without the reduced axes (a scalar shape when none is kept).
func keptShape(shape tensor.Shape, red []bool) tensor.Shape {
	out := tensor.Shape{}
	for i, s := range shape {
		if !red[i] {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return tensor.ScalarShape()
	}
	return out
}

// reduceOp sums (or averages) over a fixed set of axes.
type reduceOp struct {
	nop
	mean    bool
	in, out tensor.Shape
	red     []bool
	plan    redPlan
	acc     []float64
	buf     *tensor.Dense
	scalar  scalarBuf
}

func (op *reduceOp) Arity() int    { return 1 }
func (op *reduceOp) Type() hm.Type { return fnT(op.out.Dims(), op.in.Dims()) }
func (op *reduceOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 1); err != nil {
		return nil, err
	}
	return op.out.Clone(), nil
}

func (op *reduceOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 1); err != nil {
		return nil, err
	}
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	if !x.Shape().Eq(op.in) {
		return nil, fmt.Errorf("%s: input shape %v, built for %v", op.name, x.Shape(), op.in)
	}
	op.plan.init(op.in, op.red)
	n := op.out.TotalSize()
	if cap(op.acc) < n {
		op.acc = make([]float64, n)
	}
	acc := op.acc[:n]
	if x.Dtype() == tensor.Float32 {
		redSumKernel(flat[float32](x), acc, &op.plan)
	} else {
		redSumKernel(flat[float64](x), acc, &op.plan)
	}
	scale := 1.0
	if op.mean {
		scale = 1 / float64(op.plan.count)
	}
	if op.out.IsScalar() {
		return op.scalar.set(x.Dtype(), acc[0]*scale), nil
	}
	out := ownedOut(&op.buf, x.Dtype(), op.out)
	if x.Dtype() == tensor.Float32 {
		storeScaled(acc, flat[float32](out), scale)
	} else {
		storeScaled(acc, flat[float64](out), scale)
	}
	return out, nil
}

func (op *reduceOp) DiffWRT(int) []bool { return []bool{true} }

func (op *reduceOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	g := &expandOp{nop: newNop(op.name + "Grad"), mean: op.mean, in: op.in, out: op.out, red: op.red}
	dx, err := G.ApplyOp(g, grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx}, nil
}

// expandOp broadcasts a reduced gradient back over the reduced axes (scaled by 1/count for a
// mean).
type expandOp struct {
	nop
	mean    bool
	in, out tensor.Shape
	red     []bool
	plan    redPlan
	buf     *tensor.Dense
}

func (op *expandOp) Arity() int    { return 1 }
func (op *expandOp) Type() hm.Type { return fnT(op.in.Dims(), op.out.Dims()) }
func (op *expandOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 1); err != nil {
		return nil, err
	}
	return op.in.Clone(), nil
}

func (op *expandOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 1); err != nil {
		return nil, err
	}
	op.plan.init(op.in, op.red)
	scale := 1.0
	if op.mean {
		scale = 1 / float64(op.plan.count)
	}
	var dt tensor.Dtype
	var dy *tensor.Dense
	if op.out.IsScalar() {
		v, err := scalarIn(op.name, in[0])
		if err != nil {
			return nil, err
		}
		dt = valueDtype(in[0])
		out := ownedOut(&op.buf, dt, op.in)
		if dt == tensor.Float32 {
			fillT(flat[float32](out), float32(v*scale))
		} else {
			fillT(flat[float64](out), v*scale)
		}
		return out, nil
	}
	dy, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	if dy.Shape().TotalSize() != op.out.TotalSize() {
		return nil, fmt.Errorf("%s: gradient shape %v, want %v", op.name, dy.Shape(), op.out)
	}
	dt = dy.Dtype()
	out := ownedOut(&op.buf, dt, op.in)
	if dt == tensor.Float32 {
		redExpandKernel(flat[float32](dy), flat[float32](out), float32(scale), &op.plan)
	} else {
		redExpandKernel(flat[float64](dy), flat[float64](out), scale, &op.plan)
	}
	return out, nil
}

// redPlan describes a reduction over row-major memory: the input's dims with runs of
// neighbouring dims that are all reduced (or all kept) merged, size-1 dims dropped, and the
// stride of each merged dim in the output (0 where reduced).
type redPlan struct {
	key   []bool
	shape []int
	size  []int
	red   []bool
	ostr  []int
	idx   []int
	count int // elements summed into each output
	total int
}

func (p *redPlan) init(shape tensor.Shape, red []bool) {
	if p.shape != nil && len(p.shape) == len(shape) {
		same := true
		for i, s := range shape {
			same = same && p.shape[i] == s && p.key[i] == red[i]
		}
		if same {
			return
		}
	}
	p.shape = append(p.shape[:0], shape...)
	p.key = append(p.key[:0], red...)
	p.size, p.red = p.size[:0], p.red[:0]
	p.count, p.total = 1, 1
	for i, s := range shape {
		p.total *= s
		if red[i] {
			p.count *= s
		}
		if s == 1 {
			continue
		}
		if n := len(p.size); n > 0 && p.red[n-1] == red[i] {
			p.size[n-1] *= s
			continue
		}
		p.size = append(p.size, s)
		p.red = append(p.red, red[i])
	}
	p.ostr = append(p.ostr[:0], make([]int, len(p.size))...)
	st := 1
	for d := len(p.size) - 1; d >= 0; d-- {
		if !p.red[d] {
			p.ostr[d] = st
			st *= p.size[d]
		}
	}
	p.idx = append(p.idx[:0], make([]int, len(p.size))...)
}

// redSumKernel sets acc (the output, row-major over the kept dims) to the sums of x.
func redSumKernel[T Float](x []T, acc []float64, p *redPlan) {
	clear(acc)
	nd := len(p.size)
	if p.total == 0 {
		return
	}
	if nd == 0 {
		acc[0] = float64(x[0])
		return
	}
	inner, innerRed := p.size[nd-1], p.red[nd-1]
	idx := p.idx
	clear(idx)
	oo := 0
	for xo := 0; xo < p.total; xo += inner {
		row := x[xo : xo+inner]
		if innerRed {
			var s float64
			for _, v := range row {
				s += float64(v)
			}
			acc[oo] += s
		} else {
			a := acc[oo : oo+inner]
			for j, v := range row {
				a[j] += float64(v)
			}
		}
		for d := nd - 2; d >= 0; d-- {
			idx[d]++
			oo += p.ostr[d]
			if idx[d] < p.size[d] {
				break
			}
			oo -= p.ostr[d] * p.size[d]
			idx[d] = 0
		}
	}
}

// redExpandKernel sets dx[i] = scale·dy[output index of i].
func redExpandKernel[T Float](dy, dx []T, scale T, p *redPlan) {
	nd := len(p.size)
	if p.total == 0 {
		return
	}
	if nd == 0 {
		dx[0] = dy[0] * scale
		return
	}
	inner, innerRed := p.size[nd-1], p.red[nd-1]
	idx := p.idx
	clear(idx)
	oo := 0
	for xo := 0; xo < p.total; xo += inner {
		row := dx[xo : xo+inner]
		if innerRed {
			v := dy[oo] * scale
			for j := range row {
				row[j] = v
			}
		} else {
			g := dy[oo : oo+inner]
			for j := range row {
				row[j] = g[j] * scale
			}
		}
		for d := nd - 2; d >= 0; d-- {
			idx[d]++
			oo += p.ostr[d]
			if idx[d] < p.size[d] {
				break
			}
			oo -= p.ostr[d] * p.size[d]
			idx[d] = 0
		}
	}
}

func storeScaled[T Float](acc []float64, out []T, scale float64) {
	out = out[:len(acc)]
	for i, v := range acc {
		out[i] = T(v * scale)
	}
}

func fillT[T Float](x []T, v T) {
	for i := range x {
		x[i] = v
	}
}
