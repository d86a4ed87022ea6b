package ops

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ReLU returns max(x, 0) elementwise, for a tensor of any shape. Its gradient at 0 is 0, as
// PyTorch's.
func ReLU(x *G.Node) (*G.Node, error) { return applyUnary(x, actReLU) }

// GELU returns x·Φ(x) elementwise with Φ the standard normal CDF in its exact erf form,
// 0.5·x·(1+erf(x/√2)): PyTorch's default (approximate="none").
func GELU(x *G.Node) (*G.Node, error) { return applyUnary(x, actGELU) }

type actKind int

const (
	actReLU actKind = iota
	actGELU
)

func (k actKind) String() string {
	if k == actGELU {
		return "GELU"
	}
	return "ReLU"
}

func applyUnary(x *G.Node, k actKind) (*G.Node, error) {
	if _, err := nodeDtype(k.String(), x); err != nil {
		return nil, err
	}
	if x.Shape().IsScalar() {
		return nil, fmt.Errorf("%s: input %s is a scalar, want a tensor", k, x.Name())
	}
	y, err := G.ApplyOp(&unaryOp{nop: newNop(k.String()), kind: k, dims: x.Dims()}, x)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", k, x.Shape(), err)
	}
	return y, nil
}

// unaryOp is an elementwise activation; its backward reads the input x.
type unaryOp struct {
	nop
	kind actKind
	dims int
	out  *tensor.Dense
}

func (op *unaryOp) Arity() int    { return 1 }
func (op *unaryOp) Type() hm.Type { return fnT(op.dims, op.dims) }
func (op *unaryOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := inShapes(op.name, in, 1)
	if err != nil {
		return nil, err
	}
	return s[0].Clone(), nil
}

func (op *unaryOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 1); err != nil {
		return nil, err
	}
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	return op.do(ownedOut(&op.out, x.Dtype(), x.Shape()), x)
}

func (op *unaryOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 1); err != nil {
		return nil, err
	}
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	out, err := checkPrealloc(op.name, p, x.Dtype(), x.Shape())
	if err != nil {
		return nil, err
	}
	return op.do(out, x)
}

func (op *unaryOp) do(out, x *tensor.Dense) (G.Value, error) {
	switch x.Dtype() {
	case tensor.Float32:
		unaryFwd(op.kind, flat[float32](x), flat[float32](out))
	default:
		unaryFwd(op.kind, flat[float64](x), flat[float64](out))
	}
	return out, nil
}

func (op *unaryOp) DiffWRT(int) []bool { return []bool{true} }

func (op *unaryOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	g := &unaryGradOp{nop: newNop(op.name + "Grad"), kind: op.kind, dims: op.dims}
	dx, err := G.ApplyOp(g, in[0], grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx}, nil
}

// unaryGradOp computes dx from (x, dy).
type unaryGradOp struct {
	nop
	kind actKind
	dims int
	out  *tensor.Dense
}

func (op *unaryGradOp) Arity() int    { return 2 }
func (op *unaryGradOp) Type() hm.Type { return fnT(op.dims, op.dims, op.dims) }
func (op *unaryGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := inShapes(op.name, in, 2)
	if err != nil {
		return nil, err
	}
	return s[0].Clone(), nil
}

func (op *unaryGradOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 2); err != nil {
		return nil, err
	}
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	dy, err := denseIn(op.name, in[1])
	if err != nil {
		return nil, err
	}
	if !x.Shape().Eq(dy.Shape()) || x.Dtype() != dy.Dtype() {
		return nil, fmt.Errorf("%s: x %v %v and dy %v %v differ", op.name, x.Shape(), x.Dtype(), dy.Shape(), dy.Dtype())
	}
	out := ownedOut(&op.out, x.Dtype(), x.Shape())
	switch x.Dtype() {
	case tensor.Float32:
		unaryBwd(op.kind, flat[float32](x), flat[float32](dy), flat[float32](out))
	default:
		unaryBwd(op.kind, flat[float64](x), flat[float64](dy), flat[float64](out))
	}
	return out, nil
}

const invSqrt2 = 0.70710678118654752440
const invSqrt2Pi = 0.39894228040143267794

func unaryFwd[T Float](k actKind, x, y []T) {
	y = y[:len(x)]
	switch k {
	case actReLU:
		switch xs := any(x).(type) {
		case []float32:
			ys := any(y).([]float32)
			splitRun(len(xs), func(lo, hi int) { reluBits32(xs[lo:hi], ys[lo:hi], nil) })
		case []float64:
			reluBits64(xs, any(y).([]float64), nil)
		}
	case actGELU:
		if xs, ok := any(x).([]float32); ok {
			ys := any(y).([]float32)
			splitRun(len(xs), func(lo, hi int) { gelu32FwdFast(xs[lo:hi], ys[lo:hi]) })
			return
		}
		for i, v := range x {
			f := float64(v)
			y[i] = T(0.5 * f * (1 + math.Erf(f*invSqrt2)))
		}
	}
}

func unaryBwd[T Float](k actKind, x, dy, dx []T) {
	dy, dx = dy[:len(x)], dx[:len(x)]
	switch k {
	case actReLU:
		switch xs := any(x).(type) {
		case []float32:
			dys, dxs := any(dy).([]float32), any(dx).([]float32)
			splitRun(len(xs), func(lo, hi int) { reluBits32(dys[lo:hi], dxs[lo:hi], xs[lo:hi]) })
		case []float64:
			reluBits64(any(dy).([]float64), any(dx).([]float64), xs)
		}
	case actGELU:
		if xs, ok := any(x).([]float32); ok {
			dys, dxs := any(dy).([]float32), any(dx).([]float32)
			splitRun(len(xs), func(lo, hi int) { gelu32BwdFast(xs[lo:hi], dys[lo:hi], dxs[lo:hi]) })
			return
		}
		for i, v := range x {
			f := float64(v)
			d := 0.5*(1+math.Erf(f*invSqrt2)) + f*invSqrt2Pi*math.Exp(-0.5*f*f)
			dx[i] = T(float64(dy[i]) * d)
		}
	}
}

// reluBits32 sets y[i] = v[i] where sel[i] > 0 (sel = v when nil) and 0 elsewhere, with bit
// masks instead of branches: activation signs are random, so a branch mispredicts half the
// time and costs several times the arithmetic.
func reluBits32(v, y, sel []float32) {
	if sel == nil {
		sel = v
	}
	y, sel = y[:len(v)], sel[:len(v)]
	if simdOK() && len(v) >= simdMinLen {
		simdReLU(v, y, sel)
		return
	}
	for i, a := range v {
		y[i] = reluKeep32(a, sel[i])
	}
}

// reluKeep32 is v where s's bits are positive as an int32, else +0: reluBits32's mask
// (positive floats order like their bits; -0 and negatives have the sign bit, +0 is 0).
func reluKeep32(v, s float32) float32 {
	b := int32(math.Float32bits(s))
	m := uint32(((-b) &^ b) >> 31) // all ones when s > 0; -0 (MinInt32) gives 0
	return math.Float32frombits(math.Float32bits(v) & m)
}

// reluBits64 is reluBits32 for float64.
func reluBits64(v, y, sel []float64) {
	if sel == nil {
		sel = v
	}
	y, sel = y[:len(v)], sel[:len(v)]
	for i, a := range v {
		s := int64(math.Float64bits(sel[i]))
		m := uint64(((-s) &^ s) >> 63)
		y[i] = math.Float64frombits(math.Float64bits(a) & m)
	}
}
