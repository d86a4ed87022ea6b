package zero

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gatherOp stands in front of one parameter: forward it waits for the parameter's unit to
// be all-gathered (issuing the prefetch of the next unit) and returns a tensor over the
// gathered memory, ignoring its input (the tap of a leaf bound to never-touched scratch);
// backward it is the identity, so the gradient reaches the tap and the gradient hook.
type gatherOp struct {
	id    int64
	name  string
	unit  int
	shape []int
	view  []float32
	prog  *Program
}

func (op *gatherOp) Arity() int { return 1 }
func (op *gatherOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}
func (op *gatherOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("zero: gather %s: expected a shape, got %T", op.name, in[0])
	}
	return s.Clone(), nil
}

// Do returns a fresh tensor header each run: downstream ops may reshape it in place.
func (op *gatherOp) Do(in ...G.Value) (G.Value, error) {
	if err := op.prog.waitUnit(op.unit); err != nil {
		return nil, fmt.Errorf("zero: gather of %s: %w", op.name, err)
	}
	return tensor.New(tensor.WithShape(op.shape...), tensor.WithBacking(op.view)), nil
}
func (op *gatherOp) ReturnsPtr() bool      { return true }
func (op *gatherOp) CallsExtern() bool     { return false }
func (op *gatherOp) OverwritesInput() int  { return -1 }
func (op *gatherOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "zero-gather-%d-%s", op.id, op.name) }
func (op *gatherOp) Hashcode() uint32      { return ops.HashOf(op) }
func (op *gatherOp) String() string        { return "ZeroGather{" + op.name + "}" }
func (op *gatherOp) DiffWRT(int) []bool    { return []bool{true} }
func (op *gatherOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	return G.Nodes{grad}, nil
}
