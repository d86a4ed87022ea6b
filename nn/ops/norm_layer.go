package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// LayerNorm normalises x over its last normDims dims (biased variance, eps inside the
// square root, as PyTorch), then scales by gamma and shifts by beta, both shaped as those
// dims, or both nil for no affine transform. Statistics accumulate in float64.
func LayerNorm(x, gamma, beta *G.Node, normDims int, eps float64) (*G.Node, error) {
	const name = "LayerNorm"
	if (gamma == nil) != (beta == nil) {
		return nil, fmt.Errorf("%s: gamma and beta must both be given or both be nil", name)
	}
	nodes := []*G.Node{x}
	if gamma != nil {
		nodes = append(nodes, gamma, beta)
	}
	if _, err := sameDtype(name, nodes...); err != nil {
		return nil, err
	}
	xs := x.Shape()
	if normDims < 1 || normDims > xs.Dims() {
		return nil, fmt.Errorf("%s: input %v cannot be normalised over its last %d dims", name, xs, normDims)
	}
	last := xs[xs.Dims()-normDims:].Clone()
	if gamma != nil && (!gamma.Shape().Eq(last) || !beta.Shape().Eq(last)) {
		return nil, fmt.Errorf("%s: input %v over %d dims wants gamma and beta %v, got %v and %v", name, xs, normDims, last, gamma.Shape(), beta.Shape())
	}
	if !(eps > 0) {
		return nil, fmt.Errorf("%s: eps %v, want > 0", name, eps)
	}
	m := last.TotalSize()
	op := &lnOp{nop: newNop(name), shape: xs.Clone(), last: last, m: m, rows: xs.TotalSize() / max(m, 1), eps: eps, affine: gamma != nil}
	y, err := G.ApplyOp(op, nodes...)
	if err != nil {
		return nil, fmt.Errorf("%s: input %v: %w", name, xs, err)
	}
	return y, nil
}

// lnOp keeps, for its backward, each row's mean and 1/std and gamma of the last run, and
// receives the gradients of gamma and beta that the backward computes alongside dx.
type lnOp struct {
	nop
	shape, last   tensor.Shape
	m, rows       int
	eps           float64
	affine        bool
	mean, istd    []float64
	gamma, beta   []float64
	dgamma, dbeta []float64
	part          []float64 // lnBackward's per-block gamma and beta gradients
	out           *tensor.Dense
}

func (op *lnOp) Arity() int {
	if op.affine {
		return 3
	}
	return 1
}

func (op *lnOp) Type() hm.Type {
	d, k := op.shape.Dims(), op.last.Dims()
	if op.affine {
		return fnT(d, d, k, k)
	}
	return fnT(d, d)
}

func (op *lnOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, op.Arity()); err != nil {
		return nil, err
	}
	return op.shape.Clone(), nil
}

func (op *lnOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), op.Arity()); err != nil {
		return nil, err
	}
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	if !x.Shape().Eq(op.shape) {
		return nil, fmt.Errorf("%s: input %v, built for %v", op.name, x.Shape(), op.shape)
	}
	if op.mean == nil {
		op.mean, op.istd = make([]float64, op.rows), make([]float64, op.rows)
		op.gamma, op.beta = make([]float64, op.m), make([]float64, op.m)
		op.dgamma, op.dbeta = make([]float64, op.m), make([]float64, op.m)
	}
	if op.affine {
		for i, v := range in[1:] {
			d, err := denseIn(op.name, v)
			if err != nil {
				return nil, err
			}
			if !d.Shape().Eq(op.last) || d.Dtype() != x.Dtype() {
				return nil, fmt.Errorf("%s: input %v wants %s %v %v, got %v %v", op.name, op.shape, []string{"gamma", "beta"}[i], op.last, x.Dtype(), d.Shape(), d.Dtype())
			}
			dst := op.gamma
			if i == 1 {
				dst = op.beta
			}
			if d.Dtype() == tensor.Float32 {
				widen(flat[float32](d), dst)
			} else {
				copy(dst, flat[float64](d))
			}
		}
	} else {
		fillT(op.gamma, 1)
		clear(op.beta)
	}
	out := ownedOut(&op.out, x.Dtype(), op.shape)
	if x.Dtype() == tensor.Float32 {
		lnForward(flat[float32](x), flat[float32](out), op)
	} else {
		lnForward(flat[float64](x), flat[float64](out), op)
	}
	return out, nil
}

func (op *lnOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

func (op *lnOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	d := op.shape.Dims()
	dx, err := G.ApplyOp(&lnGradOp{nop: newNop(op.name + "Grad"), fwd: op}, in[0], grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	if !op.affine {
		return G.Nodes{dx}, nil
	}
	dg, err := G.ApplyOp(newStashOp(op.name+"GradGamma", &op.dgamma, d, op.last...), dx)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	db, err := G.ApplyOp(newStashOp(op.name+"GradBeta", &op.dbeta, d, op.last...), dx)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx, dg, db}, nil
}

// lnGradOp computes dx from (x, dy) and leaves dgamma and dbeta in the forward op.
type lnGradOp struct {
	nop
	fwd *lnOp
	out *tensor.Dense
}

func (op *lnGradOp) Arity() int { return 2 }
func (op *lnGradOp) Type() hm.Type {
	d := op.fwd.shape.Dims()
	return fnT(d, d, d)
}
func (op *lnGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 2); err != nil {
		return nil, err
	}
	return op.fwd.shape.Clone(), nil
}

func (op *lnGradOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 2); err != nil {
		return nil, err
	}
	f := op.fwd
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	dy, err := denseIn(op.name, in[1])
	if err != nil {
		return nil, err
	}
	if !x.Shape().Eq(f.shape) || !dy.Shape().Eq(f.shape) || x.Dtype() != dy.Dtype() {
		return nil, fmt.Errorf("%s: x %v and dy %v, built for %v", op.name, x.Shape(), dy.Shape(), f.shape)
	}
	if f.mean == nil {
		return nil, fmt.Errorf("%s: backward before forward", op.name)
	}
	out := ownedOut(&op.out, x.Dtype(), f.shape)
	if x.Dtype() == tensor.Float32 {
		lnBackward(flat[float32](x), flat[float32](dy), flat[float32](out), f)
	} else {
		lnBackward(flat[float64](x), flat[float64](dy), flat[float64](out), f)
	}
	return out, nil
}

// lnBlock is the number of elements per block of rows whose gamma and beta gradients
// lnBackward sums separately (then adds in block order): the result depends on the shape,
// never on the thread count.
const lnBlock = 1 << 13

func lnForward[T Float](x, y []T, op *lnOp) {
	m := op.m
	splitRows(op.rows, 3*m, func(lo, hi int) {
		if xs, ok := any(x).([]float32); ok && simdLNForward(xs, any(y).([]float32), lo, hi, m, op.gamma, op.beta, op.eps, op.mean, op.istd) {
			return
		}
		for r := lo; r < hi; r++ {
			row, out := x[r*m:(r+1)*m], y[r*m:(r+1)*m]
			var s float64
			for _, v := range row {
				s += float64(v)
			}
			mean := s / float64(m)
			var q float64
			for _, v := range row {
				d := float64(v) - mean
				q += d * d
			}
			is := invSqrt(q/float64(m) + op.eps)
			op.mean[r], op.istd[r] = mean, is
			gamma, beta := op.gamma[:len(row)], op.beta[:len(row)]
			out = out[:len(row)]
			for j, v := range row {
				out[j] = T((float64(v)-mean)*is*gamma[j] + beta[j])
			}
		}
	})
}

func lnBackward[T Float](x, dy, dx []T, op *lnOp) {
	m := op.m
	br := max(1, lnBlock/m)
	nb := (op.rows + br - 1) / br
	if cap(op.part) < 2*nb*m {
		op.part = make([]float64, 2*nb*m)
	}
	part := op.part[:2*nb*m]
	splitRows(nb, 3*br*m, func(lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			dgamma, dbeta := part[2*blk*m:(2*blk+1)*m], part[(2*blk+1)*m:(2*blk+2)*m]
			clear(dgamma)
			clear(dbeta)
			if xs, ok := any(x).([]float32); ok && simdLNBackward(xs, any(dy).([]float32), any(dx).([]float32),
				blk*br, min((blk+1)*br, op.rows), m, op.gamma, op.mean, op.istd, dgamma, dbeta) {
				continue
			}
			for r := blk * br; r < min((blk+1)*br, op.rows); r++ {
				row, g, d := x[r*m:(r+1)*m], dy[r*m:(r+1)*m], dx[r*m:(r+1)*m]
				g, d = g[:len(row)], d[:len(row)]
				gamma := op.gamma[:len(row)]
				mean, is := op.mean[r], op.istd[r]
				var a, b float64 // Σ dy·gamma and Σ dy·gamma·x̂
				for j, v := range row {
					xh := (float64(v) - mean) * is
					gj := float64(g[j])
					dgamma[j] += gj * xh
					dbeta[j] += gj
					gg := gj * gamma[j]
					a += gg
					b += gg * xh
				}
				a /= float64(m)
				b /= float64(m)
				for j, v := range row {
					xh := (float64(v) - mean) * is
					d[j] = T(is * (float64(g[j])*gamma[j] - a - xh*b))
				}
			}
		}
	})
	clear(op.dgamma)
	clear(op.dbeta)
	for blk := range nb {
		for j, v := range part[2*blk*m : (2*blk+1)*m] {
			op.dgamma[j] += v
		}
		for j, v := range part[(2*blk+1)*m : (2*blk+2)*m] {
			op.dbeta[j] += v
		}
	}
}
