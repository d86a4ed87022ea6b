package dp

import (
	"errors"
	"fmt"
	"math/rand"

	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Learnable is a named float32 tensor that a raw gorgonia graph learns. Its Value is copied
// into the DataParallel's flat parameter buffer by NewGraph; read the live value back with
// DataParallel.Learnable.
type Learnable struct {
	Name  string
	Value *tensor.Dense
}

// Input declares an input of a raw graph by its per-sample shape: Input{"x", []int{3}}
// becomes a node of shape [n, 3] for a chunk of n samples, and Batch.Inputs["x"] holds N·3
// values.
type Input struct {
	Name  string
	Shape []int
}

// GraphFunc builds one replica's graph in g for a chunk of samples, without package nn.
// learnables are nodes standing for the Learnables, in the order given to NewGraph (their
// values are the shared parameters: never write them); inputs are the chunk's input nodes
// in the order of the Input list, with the chunk size as first dimension. It returns the
// chunk's mean loss (a scalar; nil for no gradient) and the output to gather on the master
// under the name "output" (nil for none). It is called once per replica and chunk size,
// never concurrently.
type GraphFunc func(g *G.ExprGraph, learnables, inputs G.Nodes) (loss, output *G.Node, err error)

// NewGraph returns a DataParallel for a graph built by fn from learnables and input chunks,
// for users of raw gorgonia. Gradients are summed into DataParallel.Model().Params.Grad,
// laid out like the values (see Learnable and Grad); optimizers from package optim step
// Model().Params.
func NewGraph(learnables []Learnable, inputs []Input, fn GraphFunc, opts ...Option) (*DataParallel, error) {
	if fn == nil {
		return nil, errors.New("dp: nil graph function")
	}
	if len(inputs) == 0 {
		return nil, errors.New("dp: a graph needs at least one input to scatter")
	}
	root := &rawModule{learnables: learnables}
	m, err := nn.NewModel(root)
	if err != nil {
		return nil, fmt.Errorf("dp: learnables: %w", err)
	}
	build := func(b *nn.Builder, n int) (*G.Node, error) {
		ls := make(G.Nodes, len(root.params))
		for i, p := range root.params {
			if ls[i], err = b.Param(p); err != nil {
				return nil, err
			}
		}
		ins := make(G.Nodes, len(inputs))
		for i, in := range inputs {
			if ins[i], err = b.Input(in.Name, append([]int{n}, in.Shape...)...); err != nil {
				return nil, err
			}
		}
		loss, out, err := fn(b.Graph, ls, ins)
		if err != nil {
			return nil, err
		}
		if out != nil {
			b.Output("output", out)
		}
		return loss, nil
	}
	return New(m, build, append([]Option{WithGather("output")}, opts...)...)
}

// Learnable returns a tensor that aliases the live value of the i-th learnable (in the
// model's registration order) and one that aliases its gradient on the master.
func (d *DataParallel) Learnable(i int) (value, grad *tensor.Dense, err error) {
	ps := d.model.Params.Params
	if i < 0 || i >= len(ps) {
		return nil, nil, fmt.Errorf("dp: learnable %d of %d", i, len(ps))
	}
	p := ps[i]
	return tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(p.Data)),
		tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(p.Grad)), nil
}

// rawModule declares the learnables of a raw graph as parameters.
type rawModule struct {
	learnables []Learnable
	params     []*nn.Param
}

// Declare implements nn.Module: each learnable becomes a parameter initialised from its value.
func (r *rawModule) Declare(s *nn.Scope) error {
	for i, l := range r.learnables {
		if l.Value == nil || l.Value.Dtype() != tensor.Float32 {
			return fmt.Errorf("learnable %d (%q) must be a float32 tensor", i, l.Name)
		}
		src, ok := l.Value.Data().([]float32)
		if !ok {
			return fmt.Errorf("learnable %d (%q): cannot read its float32 values", i, l.Name)
		}
		shape := []int(l.Value.Shape().Clone())
		src = append([]float32(nil), src...)
		r.params = append(r.params, s.Param(l.Name, shape, func(_ *rand.Rand, d []float32) { copy(d, src) }))
	}
	return nil
}

// Forward implements nn.Module; raw graphs are built by their GraphFunc instead.
func (r *rawModule) Forward(*nn.Builder, *G.Node) (*G.Node, error) {
	return nil, errors.New("dp: a raw graph is built by its GraphFunc")
}
