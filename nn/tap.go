package nn

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// GradFunc receives a parameter's gradient as soon as backward has computed it, while the
// rest of backward is still to run (docs/DESIGN.md §3). The value is only valid during the call:
// copy it (or accumulate it) before returning.
type GradFunc func(v G.Value) error

// Tap wraps a learnable node w in an identity op whose gradient passes through fn as soon as
// the tape computes it. Graph builders call it on each learnable in their forward, and use
// the returned node instead of w: the TapeMachine then runs fn right after w's gradient, in
// backward order, which is what lets DDP start a bucket's all-reduce while backward goes on.
// G.Grad(cost, w) returns the node that calls fn.
func Tap(w *G.Node, fn GradFunc) (*G.Node, error) {
	n, err := G.ApplyOp(&tapOp{id: ops.NextID(), name: w.Name(), fn: fn}, w)
	if err != nil {
		return nil, fmt.Errorf("nn: tap %s: %w", w.Name(), err)
	}
	return n, nil
}

// tapOp is the forward identity. It returns a shallow clone so that later in-place reshapes
// never touch the parameter's own tensor header.
type tapOp struct {
	id   int64
	name string
	fn   GradFunc
}

func (op *tapOp) Arity() int { return 1 }
func (op *tapOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *tapOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("tap %s: expected a shape, got %T", op.name, in[0])
	}
	return s.Clone(), nil
}
func (op *tapOp) Do(in ...G.Value) (G.Value, error) {
	if d, ok := in[0].(*tensor.Dense); ok {
		return d.ShallowClone(), nil
	}
	return in[0], nil
}
func (op *tapOp) ReturnsPtr() bool      { return true }
func (op *tapOp) CallsExtern() bool     { return false }
func (op *tapOp) OverwritesInput() int  { return -1 }
func (op *tapOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "tap-%d-%s", op.id, op.name) }
func (op *tapOp) Hashcode() uint32      { return ops.HashOf(op) }
func (op *tapOp) String() string        { return "Tap{" + op.name + "}" }
func (op *tapOp) DiffWRT(int) []bool    { return []bool{true} }
func (op *tapOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	h, err := G.ApplyOp(&gradHookOp{id: ops.NextID(), name: op.name, fn: op.fn}, grad)
	if err != nil {
		return nil, fmt.Errorf("nn: gradient hook %s: %w", op.name, err)
	}
	return G.Nodes{h}, nil
}

// gradHookOp is an identity on the gradient that calls fn when the tape executes it.
type gradHookOp struct {
	id   int64
	name string
	fn   GradFunc
}

func (op *gradHookOp) Arity() int { return 1 }
func (op *gradHookOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *gradHookOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("grad hook %s: expected a shape, got %T", op.name, in[0])
	}
	return s.Clone(), nil
}
func (op *gradHookOp) Do(in ...G.Value) (G.Value, error) {
	if op.fn != nil {
		if err := op.fn(in[0]); err != nil {
			return nil, fmt.Errorf("gradient hook of %s: %w", op.name, err)
		}
	}
	return in[0], nil
}
func (op *gradHookOp) ReturnsPtr() bool      { return true }
func (op *gradHookOp) CallsExtern() bool     { return false }
func (op *gradHookOp) OverwritesInput() int  { return -1 }
func (op *gradHookOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "gradhook-%d-%s", op.id, op.name) }
func (op *gradHookOp) Hashcode() uint32      { return ops.HashOf(op) }
func (op *gradHookOp) String() string        { return "GradHook{" + op.name + "}" }
func (op *gradHookOp) DiffWRT(int) []bool    { return []bool{true} }
func (op *gradHookOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	return G.Nodes{grad}, nil
}
