package nn

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// keepOutputs protects the named outputs from gorgonia's in-place execution. The tape machine
// lets an op that may overwrite an input (G.Sub, G.Add, ...) write into that input's memory
// when the input is read by nothing later, so an output consumed that way would read, after
// Run, whatever the op wrote there. For each output that some op may overwrite (directly or
// through a view: an op that returns a pointer to its input), keepOutputs adds a node that reads
// the output and its views after every such op; the output then stays live past them and the
// machine runs them out of place. Outputs that nothing may overwrite get no node, so their
// programs are unchanged. The returned nodes are roots the compiled graph must run.
func keepOutputs(g *G.ExprGraph, outputs map[string]*G.Node) (G.Nodes, error) {
	var keeps G.Nodes
	for _, name := range sortedNames(outputs) {
		aliases, writers := overwriters(g, outputs[name])
		if len(writers) == 0 {
			continue
		}
		in := append(aliases, writers...)
		dims := make([]int, len(in))
		for i, a := range in {
			dims[i] = a.Dims()
		}
		k, err := G.ApplyOp(&keepOp{id: ops.NextID(), name: name, dims: dims}, in...)
		if err != nil {
			return nil, fmt.Errorf("nn: keeping output %q from in-place ops: %w", name, err)
		}
		keeps = append(keeps, k)
	}
	return keeps, nil
}

// overwriters returns n with the views of it (consumers whose op returns a pointer to an
// input) and the consumers that may overwrite n or one of its views in place.
func overwriters(g *G.ExprGraph, n *G.Node) (aliases, writers G.Nodes) {
	seen := map[*G.Node]bool{n: true}
	aliases = G.Nodes{n}
	for i := 0; i < len(aliases); i++ {
		a := aliases[i]
		for it := g.To(a.ID()); it != nil && it.Next(); {
			c := it.Node().(*G.Node)
			if c.Op() == nil || seen[c] {
				continue
			}
			if k := c.Op().OverwritesInput(); k >= 0 {
				if in := inputsOf(g, c); k < len(in) && in[k] == a {
					seen[c] = true
					writers = append(writers, c)
					continue
				}
			}
			if c.Op().ReturnsPtr() {
				seen[c] = true
				aliases = append(aliases, c)
			}
		}
	}
	return aliases, writers
}

// keepOp reads its inputs and does nothing: a node of it keeps them live until it runs. Its
// value is a zero scalar of its first input's element type.
type keepOp struct {
	id   int64
	name string
	dims []int // of each input
}

func (op *keepOp) Arity() int { return len(op.dims) }
func (op *keepOp) Type() hm.Type {
	ts := make(hm.Types, 0, len(op.dims)+1)
	for i, d := range op.dims {
		var t hm.Type = hm.TypeVariable(rune('a' + i))
		if d > 0 {
			t = G.TensorType{Dims: d, Of: t}
		}
		ts = append(ts, t)
	}
	return hm.NewFnType(append(ts, hm.TypeVariable('a'))...)
}
func (op *keepOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}
func (op *keepOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) > 0 && in[0].Dtype() == tensor.Float64 {
		return G.NewF64(0), nil
	}
	return G.NewF32(0), nil
}
func (op *keepOp) ReturnsPtr() bool      { return false }
func (op *keepOp) CallsExtern() bool     { return false }
func (op *keepOp) OverwritesInput() int  { return -1 }
func (op *keepOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "keep-%d-%s", op.id, op.name) }
func (op *keepOp) Hashcode() uint32      { return ops.HashOf(op) }
func (op *keepOp) String() string        { return "Keep{" + op.name + "}" }
