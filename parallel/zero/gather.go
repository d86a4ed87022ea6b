package zero

import (
	"fmt"
	"hash"
	"slices"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gatherOp stands in front of one parameter: forward it waits for the parameter's unit to
// be all-gathered (issuing the prefetch of the next unit) and returns a tensor over the
// gathered memory, ignoring its input (the tap of a leaf bound to never-read memory);
// backward it is the identity, so the gradient reaches the tap and the gradient sink.
//
// The gather of the first parameter a unit uses has a second input, x: the newest forward
// node when the unit began, normally the previous unit's output (see schedule.go). Forward,
// reaching it means the previous unit's forward is done, so the op releases that unit's
// gathered parameters. Backward, it contributes a zero gradient to x through a barrier op
// that re-gathers the previous unit first: x's gradient, and so every backward op of the
// previous unit, depends on the barrier, so the parameters are back before they are read.
type gatherOp struct {
	id    int64
	name  string
	unit  int
	shape []int
	view  []float32
	prog  *Program

	prev    int     // unit released forward and re-gathered backward; -1: arity 1
	xShape  []int   // x's shape (arity 2)
	barrier *G.Node // created by SymDiff
}

func (op *gatherOp) Arity() int {
	if op.prev >= 0 {
		return 2
	}
	return 1
}

func (op *gatherOp) Type() hm.Type {
	if op.prev >= 0 {
		w := G.TensorType{Dims: len(op.shape), Of: tensor.Float32}
		return hm.NewFnType(w, G.TensorType{Dims: len(op.xShape), Of: tensor.Float32}, w)
	}
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
	if op.prev >= 0 {
		if err := op.prog.forwardDone(op.prev); err != nil {
			return nil, fmt.Errorf("zero: gather of %s: %w", op.name, err)
		}
	}
	if err := op.prog.waitUnit(op.unit); err != nil {
		return nil, fmt.Errorf("zero: gather of %s: %w", op.name, err)
	}
	return tensor.New(tensor.WithShape(op.shape...), tensor.WithBacking(op.view)), nil
}
func (op *gatherOp) ReturnsPtr() bool     { return true }
func (op *gatherOp) CallsExtern() bool    { return false }
func (op *gatherOp) OverwritesInput() int { return -1 }
func (op *gatherOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "zero-gather-%d-%s-%d", op.id, op.name, op.prev)
}
func (op *gatherOp) Hashcode() uint32     { return ops.HashOf(op) }
func (op *gatherOp) String() string       { return "ZeroGather{" + op.name + "}" }
func (op *gatherOp) DiffWRT(n int) []bool { return slices.Repeat([]bool{true}, n) }

func (op *gatherOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.prev < 0 {
		return G.Nodes{grad}, nil
	}
	b, err := G.ApplyOp(&barrierOp{id: ops.NextID(), unit: op.prev, shape: op.xShape, prog: op.prog}, grad)
	if err != nil {
		return nil, fmt.Errorf("zero: re-gather barrier before %s: %w", op.name, err)
	}
	op.barrier = b
	return G.Nodes{grad, b}, nil
}

// barrierOp runs in backward once the next unit has started its backward (its input is the
// gradient of the next unit's first parameter): it waits for unit's re-gather (issuing the
// prefetch of the units before it) and returns zeros of x's shape, x's gradient contribution.
type barrierOp struct {
	id    int64
	unit  int
	shape []int
	zeros []float32 // set by Compile
	prog  *Program
}

func (op *barrierOp) Arity() int { return 1 }
func (op *barrierOp) Type() hm.Type {
	return hm.NewFnType(hm.TypeVariable('a'), G.TensorType{Dims: len(op.shape), Of: tensor.Float32})
}
func (op *barrierOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(op.shape).Clone(), nil
}

// Do returns its slot of the program's zeros region, which Run releases (back to zeros)
// at its end: the op that adds the zeros into x's gradient may write into them.
func (op *barrierOp) Do(...G.Value) (G.Value, error) {
	if err := op.prog.regather(op.unit); err != nil {
		return nil, err
	}
	return tensor.New(tensor.WithShape(op.shape...), tensor.WithBacking(op.zeros)), nil
}
func (op *barrierOp) ReturnsPtr() bool      { return true }
func (op *barrierOp) CallsExtern() bool     { return false }
func (op *barrierOp) OverwritesInput() int  { return -1 }
func (op *barrierOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "zero-regather-%d-%d", op.id, op.unit) }
func (op *barrierOp) Hashcode() uint32      { return ops.HashOf(op) }
func (op *barrierOp) String() string        { return fmt.Sprintf("ZeroRegather{%d}", op.unit) }
func (op *barrierOp) DiffWRT(int) []bool    { return []bool{false} }
func (op *barrierOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("zero: the re-gather barrier has no derivative")
}
