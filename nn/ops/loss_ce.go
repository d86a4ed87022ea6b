package ops

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// CrossEntropy is the mean cross-entropy of logits [N,K] against labels [N] (a node of the
// same dtype holding class indices as floats), with PyTorch's label smoothing s in [0,1]:
// loss_i = (1-s)·nll_i + s·mean_k(-log p_ik), loss = mean_i loss_i. The result is a scalar.
// A label that is not an integer in [0,K) is a run-time error naming its index. Labels get
// no gradient.
func CrossEntropy(logits, labels *G.Node, smoothing float64) (*G.Node, error) {
	const name = "CrossEntropy"
	if _, err := sameDtype(name, logits, labels); err != nil {
		return nil, err
	}
	ls, ys := logits.Shape(), labels.Shape()
	if ls.Dims() != 2 || ys.Dims() != 1 || ys[0] != ls[0] {
		return nil, fmt.Errorf("%s: logits %v and labels %v, want [N,K] and [N]", name, ls, ys)
	}
	if !(smoothing >= 0 && smoothing <= 1) {
		return nil, fmt.Errorf("%s: label smoothing %v, want it in [0,1]", name, smoothing)
	}
	op := &ceOp{nop: newNop(name), n: ls[0], k: ls[1], s: smoothing}
	y, err := G.ApplyOp(op, logits, labels)
	if err != nil {
		return nil, fmt.Errorf("%s: logits %v, labels %v: %w", name, ls, ys, err)
	}
	return y, nil
}

type ceOp struct {
	nop
	n, k   int
	s      float64
	scalar scalarBuf
}

func (op *ceOp) Arity() int    { return 2 }
func (op *ceOp) Type() hm.Type { return fnT(0, 2, 1) }
func (op *ceOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 2); err != nil {
		return nil, err
	}
	return tensor.ScalarShape(), nil
}

// ceInputs reads and checks logits and labels.
func ceInputs(name string, n, k int, in []G.Value) (x, y *tensor.Dense, err error) {
	if x, err = denseIn(name, in[0]); err != nil {
		return nil, nil, err
	}
	if y, err = denseIn(name, in[1]); err != nil {
		return nil, nil, err
	}
	if !x.Shape().Eq(tensor.Shape{n, k}) || !y.Shape().Eq(tensor.Shape{n}) || x.Dtype() != y.Dtype() {
		return nil, nil, fmt.Errorf("%s: logits %v and labels %v, built for [%d %d] and [%d]", name, x.Shape(), y.Shape(), n, k, n)
	}
	return x, y, nil
}

func (op *ceOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 2); err != nil {
		return nil, err
	}
	x, y, err := ceInputs(op.name, op.n, op.k, in)
	if err != nil {
		return nil, err
	}
	var loss float64
	if x.Dtype() == tensor.Float32 {
		loss, err = ceForward(flat[float32](x), flat[float32](y), op.n, op.k, op.s)
	} else {
		loss, err = ceForward(flat[float64](x), flat[float64](y), op.n, op.k, op.s)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: logits %v: %w", op.name, x.Shape(), err)
	}
	return op.scalar.set(x.Dtype(), loss), nil
}

func (op *ceOp) DiffWRT(int) []bool { return []bool{true, false} }

func (op *ceOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	g := &ceGradOp{nop: newNop(op.name + "Grad"), n: op.n, k: op.k, s: op.s}
	dx, err := G.ApplyOp(g, in[0], in[1], grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx, nil}, nil
}

// ceGradOp computes d loss/d logits = g/N·(softmax - (1-s)·onehot - s/K) from (logits,
// labels, g).
type ceGradOp struct {
	nop
	n, k int
	s    float64
	out  *tensor.Dense
	exp  []float64 // one row's exp(x - max), reused from call to call
}

func (op *ceGradOp) Arity() int    { return 3 }
func (op *ceGradOp) Type() hm.Type { return fnT(2, 2, 1, 0) }
func (op *ceGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 3); err != nil {
		return nil, err
	}
	return tensor.Shape{op.n, op.k}, nil
}

func (op *ceGradOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 3); err != nil {
		return nil, err
	}
	x, y, err := ceInputs(op.name, op.n, op.k, in[:2])
	if err != nil {
		return nil, err
	}
	g, err := scalarIn(op.name, in[2])
	if err != nil {
		return nil, err
	}
	out := ownedOut(&op.out, x.Dtype(), x.Shape())
	if len(op.exp) != op.k {
		op.exp = make([]float64, op.k)
	}
	if x.Dtype() == tensor.Float32 {
		err = ceBackward(flat[float32](x), flat[float32](y), flat[float32](out), op.exp, op.n, op.k, op.s, g)
	} else {
		err = ceBackward(flat[float64](x), flat[float64](y), flat[float64](out), op.exp, op.n, op.k, op.s, g)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: logits %v: %w", op.name, x.Shape(), err)
	}
	return out, nil
}

// label returns the class index held by v, or an error naming sample i.
func label[T Float](v T, i, k int) (int, error) {
	c := int(v)
	if T(c) != v || c < 0 || c >= k {
		return 0, fmt.Errorf("label %v at index %d out of range [0,%d)", v, i, k)
	}
	return c, nil
}

// logSumExp returns max and log Σ exp(x-max) of a row, in float64.
func logSumExp[T Float](row []T) (mx, lse float64) {
	mx = math.Inf(-1)
	for _, v := range row {
		mx = max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return mx, math.Log(s)
}

func ceForward[T Float](x, y []T, n, k int, s float64) (float64, error) {
	var total float64
	for i := 0; i < n; i++ {
		c, err := label(y[i], i, k)
		if err != nil {
			return 0, err
		}
		row := x[i*k : (i+1)*k]
		mx, lse := logSumExp(row)
		z := mx + lse // log Σ exp(x)
		nll := z - float64(row[c])
		if s == 0 {
			total += nll
			continue
		}
		var sum float64
		for _, v := range row {
			sum += float64(v)
		}
		total += (1-s)*nll + s*(z-sum/float64(k))
	}
	return total / float64(n), nil
}

// ceBackward writes d loss/d logits into dx (n×k, like x): row i is g/n·(softmax(x_i) -
// (1-s)·onehot(y_i) - s/k), the softmax computed in float64 as exp(x - max) / Σ exp(x - max),
// one exponential per logit. e is k float64s of scratch.
func ceBackward[T Float](x, y, dx []T, e []float64, n, k int, s, g float64) error {
	scale := g / float64(n)
	off := scale * s / float64(k)
	e = e[:k]
	for i := 0; i < n; i++ {
		c, err := label(y[i], i, k)
		if err != nil {
			return err
		}
		row, d := x[i*k:(i+1)*k], dx[i*k:(i+1)*k]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = max(mx, float64(v))
		}
		var sum float64
		for j, v := range row {
			e[j] = math.Exp(float64(v) - mx)
			sum += e[j]
		}
		// A row of +Inf or NaN logits gives NaN, as exp(x - max - log sum) did.
		r := scale / sum
		for j := range d {
			d[j] = T(e[j]*r - off)
		}
		d[c] = T(e[c]*r - off - scale*(1-s))
	}
	return nil
}
