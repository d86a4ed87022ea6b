package ops

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Softmax returns exp(x)/Σ exp(x) along axis (negative counts from the end), computed
// stably (the maximum is subtracted first) with float64 accumulation.
func Softmax(x *G.Node, axis int) (*G.Node, error) { return softmaxNode("Softmax", x, axis, false) }

// LogSoftmax returns x - log Σ exp(x) along axis (negative counts from the end).
func LogSoftmax(x *G.Node, axis int) (*G.Node, error) {
	return softmaxNode("LogSoftmax", x, axis, true)
}

func softmaxNode(name string, x *G.Node, axis int, log bool) (*G.Node, error) {
	if _, err := nodeDtype(name, x); err != nil {
		return nil, err
	}
	s := x.Shape()
	ax := axis
	if ax < 0 {
		ax += s.Dims()
	}
	if ax < 0 || ax >= s.Dims() {
		return nil, fmt.Errorf("%s: axis %d out of range for shape %v", name, axis, s)
	}
	op := &softmaxOp{nop: newNop(name), log: log, shape: s.Clone()}
	op.outer, op.n = 1, s[ax]
	op.inner = 1
	for i, d := range s {
		switch {
		case i < ax:
			op.outer *= d
		case i > ax:
			op.inner *= d
		}
	}
	y, err := G.ApplyOp(op, x)
	if err != nil {
		return nil, fmt.Errorf("%s: %v axis %d: %w", name, s, axis, err)
	}
	return y, nil
}

// softmaxOp views x as [outer, n, inner] and normalises over n.
type softmaxOp struct {
	nop
	log             bool
	shape           tensor.Shape
	outer, n, inner int
	out             *tensor.Dense
	mx, acc         []float64 // per-inner scratch
}

func (op *softmaxOp) Arity() int    { return 1 }
func (op *softmaxOp) Type() hm.Type { return fnT(op.shape.Dims(), op.shape.Dims()) }
func (op *softmaxOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 1); err != nil {
		return nil, err
	}
	return op.shape.Clone(), nil
}

func (op *softmaxOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 1); err != nil {
		return nil, err
	}
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	if !x.Shape().Eq(op.shape) {
		return nil, fmt.Errorf("%s: input %v, built for %v", op.name, x.Shape(), op.shape)
	}
	if len(op.mx) != op.inner {
		op.mx, op.acc = make([]float64, op.inner), make([]float64, op.inner)
	}
	out := ownedOut(&op.out, x.Dtype(), op.shape)
	if x.Dtype() == tensor.Float32 {
		softmaxFwd(flat[float32](x), flat[float32](out), op)
	} else {
		softmaxFwd(flat[float64](x), flat[float64](out), op)
	}
	return out, nil
}

func (op *softmaxOp) DiffWRT(int) []bool { return []bool{true} }

func (op *softmaxOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	g := &softmaxGradOp{nop: newNop(op.name + "Grad"), fwd: op}
	dx, err := G.ApplyOp(g, out, grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx}, nil
}

// softmaxGradOp computes dx from the forward's output y and dy:
// softmax: y·(dy - Σ dy·y); log-softmax: dy - exp(y)·Σ dy.
type softmaxGradOp struct {
	nop
	fwd *softmaxOp
	out *tensor.Dense
	acc []float64
}

func (op *softmaxGradOp) Arity() int { return 2 }
func (op *softmaxGradOp) Type() hm.Type {
	d := op.fwd.shape.Dims()
	return fnT(d, d, d)
}
func (op *softmaxGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 2); err != nil {
		return nil, err
	}
	return op.fwd.shape.Clone(), nil
}

func (op *softmaxGradOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 2); err != nil {
		return nil, err
	}
	y, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	dy, err := denseIn(op.name, in[1])
	if err != nil {
		return nil, err
	}
	f := op.fwd
	if !y.Shape().Eq(f.shape) || !dy.Shape().Eq(f.shape) || y.Dtype() != dy.Dtype() {
		return nil, fmt.Errorf("%s: y %v and dy %v, built for %v", op.name, y.Shape(), dy.Shape(), f.shape)
	}
	if len(op.acc) != f.inner {
		op.acc = make([]float64, f.inner)
	}
	out := ownedOut(&op.out, y.Dtype(), f.shape)
	if y.Dtype() == tensor.Float32 {
		softmaxBwd(flat[float32](y), flat[float32](dy), flat[float32](out), f, op.acc)
	} else {
		softmaxBwd(flat[float64](y), flat[float64](dy), flat[float64](out), f, op.acc)
	}
	return out, nil
}

func softmaxFwd[T Float](x, y []T, op *softmaxOp) {
	n, inner := op.n, op.inner
	block := n * inner
	for o := 0; o < op.outer; o++ {
		xb, yb := x[o*block:(o+1)*block], y[o*block:(o+1)*block]
		if inner == 1 {
			mx, lse := logSumExp(xb)
			for j, v := range xb {
				if op.log {
					yb[j] = T(float64(v) - mx - lse)
				} else {
					yb[j] = T(math.Exp(float64(v) - mx - lse))
				}
			}
			continue
		}
		// Several independent softmaxes interleaved with stride inner: walk them together
		// row by row so that memory is read contiguously.
		mx, acc := op.mx, op.acc
		copyWiden(xb[:inner], mx)
		for r := 1; r < n; r++ {
			for j, v := range xb[r*inner : (r+1)*inner] {
				mx[j] = max(mx[j], float64(v))
			}
		}
		clear(acc)
		for r := 0; r < n; r++ {
			for j, v := range xb[r*inner : (r+1)*inner] {
				acc[j] += math.Exp(float64(v) - mx[j])
			}
		}
		for j := range acc {
			acc[j] = mx[j] + math.Log(acc[j]) // log Σ exp
		}
		for r := 0; r < n; r++ {
			row, out := xb[r*inner:(r+1)*inner], yb[r*inner:(r+1)*inner]
			for j, v := range row {
				if op.log {
					out[j] = T(float64(v) - acc[j])
				} else {
					out[j] = T(math.Exp(float64(v) - acc[j]))
				}
			}
		}
	}
}

func softmaxBwd[T Float](y, dy, dx []T, op *softmaxOp, acc []float64) {
	n, inner := op.n, op.inner
	block := n * inner
	for o := 0; o < op.outer; o++ {
		yb, gb, db := y[o*block:(o+1)*block], dy[o*block:(o+1)*block], dx[o*block:(o+1)*block]
		clear(acc)
		// acc = Σ dy·y (softmax) or Σ dy (log-softmax) over n, per inner position.
		for r := 0; r < n; r++ {
			row, g := yb[r*inner:(r+1)*inner], gb[r*inner:(r+1)*inner]
			for j, v := range row {
				if op.log {
					acc[j] += float64(g[j])
				} else {
					acc[j] += float64(g[j]) * float64(v)
				}
			}
		}
		for r := 0; r < n; r++ {
			row, g, d := yb[r*inner:(r+1)*inner], gb[r*inner:(r+1)*inner], db[r*inner:(r+1)*inner]
			for j, v := range row {
				if op.log {
					d[j] = T(float64(g[j]) - math.Exp(float64(v))*acc[j])
				} else {
					d[j] = T(float64(v) * (float64(g[j]) - acc[j]))
				}
			}
		}
	}
}

func copyWiden[T Float](src []T, dst []float64) {
	for i, v := range src {
		dst[i] = float64(v)
	}
}
