package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Add returns a+b elementwise with NumPy broadcasting: shapes are aligned at their last
// dims, and each pair of dims must be equal or one of them 1 (a missing leading dim counts
// as 1). Examples: residuals [N,C,H,W]+[N,C,H,W], an attention bias [B,H,N,N]+[1,H,N,N], a
// bias [N,K]+[K]. The gradient of each input is the upstream gradient summed back to that
// input's shape. No broadcast copy of either input is made.
func Add(a, b *G.Node) (*G.Node, error) {
	if _, err := sameDtype("Add", a, b); err != nil {
		return nil, err
	}
	as, bs := a.Shape(), b.Shape()
	if as.IsScalar() || bs.IsScalar() {
		return nil, fmt.Errorf("Add: shapes %v and %v: scalars are not supported", as, bs)
	}
	out, err := broadcastShape(as, bs)
	if err != nil {
		return nil, fmt.Errorf("Add: %w", err)
	}
	op := &addOp{nop: newNop("Add"), a: as.Clone(), b: bs.Clone(), out: out}
	y, err := G.ApplyOp(op, a, b)
	if err != nil {
		return nil, fmt.Errorf("Add: %v + %v: %w", as, bs, err)
	}
	return y, nil
}

// broadcastShape returns NumPy's broadcast of two shapes.
func broadcastShape(a, b tensor.Shape) (tensor.Shape, error) {
	n := max(len(a), len(b))
	out := make(tensor.Shape, n)
	for i := 0; i < n; i++ {
		da, db := dimFromEnd(a, n-1-i), dimFromEnd(b, n-1-i)
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast (dim %d: %d vs %d)", a, b, i, da, db)
		}
	}
	return out, nil
}

// dimFromEnd returns s's k-th dim counted from the last (k=0), or 1 past its start.
func dimFromEnd(s tensor.Shape, k int) int {
	if k >= len(s) {
		return 1
	}
	return s[len(s)-1-k]
}

// broadcastRed marks the dims of out over which an input of shape in was broadcast.
func broadcastRed(in, out tensor.Shape) []bool {
	red := make([]bool, len(out))
	for i := range out {
		red[i] = dimFromEnd(in, len(out)-1-i) == 1 && out[i] != 1
	}
	return red
}

type addOp struct {
	nop
	a, b, out tensor.Shape
	plan      bcastPlan
	buf       *tensor.Dense
}

func (op *addOp) Arity() int    { return 2 }
func (op *addOp) Type() hm.Type { return fnT(op.out.Dims(), op.a.Dims(), op.b.Dims()) }
func (op *addOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 2); err != nil {
		return nil, err
	}
	return op.out.Clone(), nil
}

func (op *addOp) Do(in ...G.Value) (G.Value, error) {
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
	if !a.Shape().Eq(op.a) || !b.Shape().Eq(op.b) || a.Dtype() != b.Dtype() {
		return nil, fmt.Errorf("Add: inputs %v %v + %v %v, built for %v + %v", a.Shape(), a.Dtype(), b.Shape(), b.Dtype(), op.a, op.b)
	}
	op.plan.init(op.a, op.b, op.out)
	out := ownedOut(&op.buf, a.Dtype(), op.out)
	if a.Dtype() == tensor.Float32 {
		addKernel(flat[float32](a), flat[float32](b), flat[float32](out), &op.plan)
	} else {
		addKernel(flat[float64](a), flat[float64](b), flat[float64](out), &op.plan)
	}
	return out, nil
}

func (op *addOp) DiffWRT(int) []bool { return []bool{true, true} }

func (op *addOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	res := make(G.Nodes, 2)
	for i, s := range []tensor.Shape{op.a, op.b} {
		if s.Eq(op.out) {
			res[i] = grad
			continue
		}
		r := &reduceOp{nop: newNop("AddGrad"), in: op.out, red: broadcastRed(s, op.out), out: s}
		n, err := G.ApplyOp(r, grad)
		if err != nil {
			return nil, fmt.Errorf("Add backward to %v: %w", s, err)
		}
		res[i] = n
	}
	return res, nil
}

// bcastPlan walks the output in row-major order with the offsets of both inputs; runs of
// neighbouring dims with the same broadcast pattern are merged and size-1 dims dropped.
// init computes it once: an op's shapes are fixed when it is built.
type bcastPlan struct {
	ready       bool // the shapes are fixed when the op is built
	size        []int
	sa, sb, idx []int
	total       int
}

func (p *bcastPlan) init(a, b, out tensor.Shape) {
	if p.ready {
		return
	}
	p.ready = true
	n := len(out)
	pa, pb := make([]int, n), make([]int, n)
	sta, stb := 1, 1
	for i := n - 1; i >= 0; i-- {
		if da := dimFromEnd(a, n-1-i); da != 1 {
			pa[i] = sta
			sta *= da
		}
		if db := dimFromEnd(b, n-1-i); db != 1 {
			pb[i] = stb
			stb *= db
		}
	}
	p.size, p.sa, p.sb = p.size[:0], p.sa[:0], p.sb[:0]
	p.total = out.TotalSize()
	for i := 0; i < n; i++ {
		if out[i] == 1 {
			continue
		}
		if k := len(p.size); k > 0 && (p.sa[k-1] == 0) == (pa[i] == 0) && (p.sb[k-1] == 0) == (pb[i] == 0) {
			p.size[k-1] *= out[i]
			p.sa[k-1], p.sb[k-1] = pa[i], pb[i]
			continue
		}
		p.size = append(p.size, out[i])
		p.sa = append(p.sa, pa[i])
		p.sb = append(p.sb, pb[i])
	}
	p.idx = make([]int, len(p.size))
}

func addKernel[T Float](a, b, out []T, p *bcastPlan) {
	nd := len(p.size)
	if p.total == 0 {
		return
	}
	if nd == 0 {
		out[0] = a[0] + b[0]
		return
	}
	inner := p.size[nd-1]
	ia, ib := p.sa[nd-1] != 0, p.sb[nd-1] != 0
	if nd == 1 && ia && ib { // equal shapes (residual connections): split across threads
		a, b, out = a[:p.total], b[:p.total], out[:p.total]
		splitRun(p.total, func(lo, hi int) {
			x, y, o := a[lo:hi], b[lo:hi], out[lo:hi]
			y, o = y[:len(x)], o[:len(x)]
			for j, v := range x {
				o[j] = v + y[j]
			}
		})
		return
	}
	idx := p.idx
	clear(idx)
	ao, bo := 0, 0
	for oo := 0; oo < p.total; oo += inner {
		o := out[oo : oo+inner]
		switch {
		case ia && ib:
			x, y := a[ao:ao+inner], b[bo:bo+inner]
			for j := range o {
				o[j] = x[j] + y[j]
			}
		case ia:
			x, y := a[ao:ao+inner], b[bo]
			for j := range o {
				o[j] = x[j] + y
			}
		case ib:
			x, y := a[ao], b[bo:bo+inner]
			for j := range o {
				o[j] = x + y[j]
			}
		default:
			v := a[ao] + b[bo]
			for j := range o {
				o[j] = v
			}
		}
		for d := nd - 2; d >= 0; d-- {
			idx[d]++
			ao += p.sa[d]
			bo += p.sb[d]
			if idx[d] < p.size[d] {
				break
			}
			ao -= p.sa[d] * p.size[d]
			bo -= p.sb[d] * p.size[d]
			idx[d] = 0
		}
	}
}
