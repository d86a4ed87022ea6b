package ops

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// SoftCrossEntropy is the mean cross-entropy of logits [N,K] against soft targets [N,K] (a
// node of the same dtype, each row a distribution over the K classes, as mixup, cutmix and
// label smoothing make them): loss = mean_i Σ_k -t_ik·log softmax(x_i)_k, PyTorch's
// CrossEntropyLoss with class probabilities (timm's SoftTargetCrossEntropy). The result is
// a scalar. Rows need not sum to 1 (the gradient, g/N·(softmax·Σ_k t_ik - t_i), is exact
// for any targets); targets get no gradient.
func SoftCrossEntropy(logits, targets *G.Node) (*G.Node, error) {
	const name = "SoftCrossEntropy"
	if _, err := sameDtype(name, logits, targets); err != nil {
		return nil, err
	}
	ls, ts := logits.Shape(), targets.Shape()
	if ls.Dims() != 2 || !ts.Eq(ls) {
		return nil, fmt.Errorf("%s: logits %v and targets %v, want both [N,K]", name, ls, ts)
	}
	op := &softCEOp{nop: newNop(name), n: ls[0], k: ls[1]}
	y, err := G.ApplyOp(op, logits, targets)
	if err != nil {
		return nil, fmt.Errorf("%s: logits %v, targets %v: %w", name, ls, ts, err)
	}
	return y, nil
}

type softCEOp struct {
	nop
	n, k   int
	scalar scalarBuf
}

func (op *softCEOp) Arity() int    { return 2 }
func (op *softCEOp) Type() hm.Type { return fnT(0, 2, 2) }
func (op *softCEOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 2); err != nil {
		return nil, err
	}
	return tensor.ScalarShape(), nil
}

// softInputs reads and checks logits and targets.
func softInputs(name string, n, k int, in []G.Value) (x, t *tensor.Dense, err error) {
	if x, err = denseIn(name, in[0]); err != nil {
		return nil, nil, err
	}
	if t, err = denseIn(name, in[1]); err != nil {
		return nil, nil, err
	}
	want := tensor.Shape{n, k}
	if !x.Shape().Eq(want) || !t.Shape().Eq(want) || x.Dtype() != t.Dtype() {
		return nil, nil, fmt.Errorf("%s: logits %v and targets %v, built for %v", name, x.Shape(), t.Shape(), want)
	}
	return x, t, nil
}

func (op *softCEOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 2); err != nil {
		return nil, err
	}
	x, t, err := softInputs(op.name, op.n, op.k, in)
	if err != nil {
		return nil, err
	}
	var loss float64
	if x.Dtype() == tensor.Float32 {
		loss = softCEForward(flat[float32](x), flat[float32](t), op.n, op.k)
	} else {
		loss = softCEForward(flat[float64](x), flat[float64](t), op.n, op.k)
	}
	return op.scalar.set(x.Dtype(), loss), nil
}

func (op *softCEOp) DiffWRT(int) []bool { return []bool{true, false} }

func (op *softCEOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	g := &softCEGradOp{nop: newNop(op.name + "Grad"), n: op.n, k: op.k}
	dx, err := G.ApplyOp(g, in[0], in[1], grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx, nil}, nil
}

// softCEGradOp computes d loss/d logits = g/N·(softmax·Σ_k t_k - t) from (logits, targets, g).
type softCEGradOp struct {
	nop
	n, k int
	out  *tensor.Dense
}

func (op *softCEGradOp) Arity() int    { return 3 }
func (op *softCEGradOp) Type() hm.Type { return fnT(2, 2, 2, 0) }
func (op *softCEGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 3); err != nil {
		return nil, err
	}
	return tensor.Shape{op.n, op.k}, nil
}

func (op *softCEGradOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 3); err != nil {
		return nil, err
	}
	x, t, err := softInputs(op.name, op.n, op.k, in[:2])
	if err != nil {
		return nil, err
	}
	g, err := scalarIn(op.name, in[2])
	if err != nil {
		return nil, err
	}
	out := ownedOut(&op.out, x.Dtype(), x.Shape())
	if x.Dtype() == tensor.Float32 {
		softCEBackward(flat[float32](x), flat[float32](t), flat[float32](out), op.n, op.k, g)
	} else {
		softCEBackward(flat[float64](x), flat[float64](t), flat[float64](out), op.n, op.k, g)
	}
	return out, nil
}

func softCEForward[T Float](x, t []T, n, k int) float64 {
	var total float64
	for i := 0; i < n; i++ {
		row, ti := x[i*k:(i+1)*k], t[i*k:(i+1)*k]
		mx, lse := logSumExp(row)
		z := mx + lse
		for j, v := range row {
			if ti[j] != 0 {
				total += float64(ti[j]) * (z - float64(v))
			}
		}
	}
	return total / float64(n)
}

func softCEBackward[T Float](x, t, dx []T, n, k int, g float64) {
	scale := g / float64(n)
	for i := 0; i < n; i++ {
		row, ti, d := x[i*k:(i+1)*k], t[i*k:(i+1)*k], dx[i*k:(i+1)*k]
		mx, lse := logSumExp(row)
		var mass float64
		for _, v := range ti {
			mass += float64(v)
		}
		for j, v := range row {
			d[j] = T(scale * (mass*math.Exp(float64(v)-mx-lse) - float64(ti[j])))
		}
	}
}
