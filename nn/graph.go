package nn

import (
	"fmt"
	"math/rand"

	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A plain gorgonia model (docs/DESIGN.md §11) is a BuildFunc that creates its learnables
// itself, in gorgonia's own style (G.NewMatrix, G.NewTensor with G.WithInit or G.WithValue),
// on b.Graph, declares its inputs with b.Input, and passes every learnable through
// b.Learnable before the forward reads it:
//
//	func mlp(b *nn.Builder) (*G.Node, error) {
//		x, _ := b.Input("x", 32, 4)
//		y, _ := b.Input("y", 32, 1)
//		w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(4, 1), G.WithName("w"), G.WithInit(G.GlorotU(1)))
//		wu, err := b.Learnable(w)
//		if err != nil {
//			return nil, err
//		}
//		d := G.Must(G.Sub(G.Must(G.Mul(x, wu)), y))
//		return G.Mean(G.Must(G.Square(d)))
//	}
//
// NewGraphModel runs the function once to find the learnables and gives them flat parameter
// and gradient buffers, as NewModel does for modules. From then on the function is compiled
// like any other BuildFunc, by every strategy: nn.Compile in one process, ddp, dp (as a
// ChunkFunc) and zero. Each compilation creates the learnables anew on its own graph, and
// Learnable binds them to the model's memory, so that the k-th learnable of every graph is
// the k-th parameter. After a Run, gorgonia's Node.Grad() of each learnable returns the
// model's gradient (the average over the replicas under DDP): gorgonia's solvers and
// hand-written updates read it, and the solvers' zeroing of it after their step clears the
// model's gradient (Program.Learnables).

// probe is what NewGraphModel's discovery run records.
type probe struct {
	params []*Param
	values [][]float32
	seen   map[*G.Node]bool
}

// Learnable adopts w, a learnable the build function created on b.Graph (a float32 node
// without an op, holding its initial value), as the model's next parameter, and returns the
// node the forward must use in its place (w through the gradient tap and the strategy's
// hooks). Calling it again with the same w returns the same node. While NewGraphModel
// discovers the model it records w (its name, or "param<k>" when unnamed, its shape and its
// value) and returns w itself.
//
// Every compilation must adopt the same learnables in the same order, with the same names
// and shapes; a learnable beyond the model's parameters, or of another name or shape, is an
// error naming it.
func (b *Builder) Learnable(w *G.Node) (*G.Node, error) {
	if w == nil {
		return nil, fmt.Errorf("nn: Learnable of a nil node")
	}
	if w.Op() != nil {
		return nil, fmt.Errorf("nn: learnable %s is computed by %v: only nodes without an op (G.NewMatrix, G.NewTensor, ...) can be learnables", w.Name(), w.Op())
	}
	if w.Dtype() != tensor.Float32 {
		return nil, fmt.Errorf("nn: learnable %s is %v, want float32", w.Name(), w.Dtype())
	}
	if b.probe != nil {
		return b.discover(w)
	}
	if p, ok := b.learned[w]; ok {
		return b.nodes[p], nil
	}
	k := len(b.learned)
	params := b.Model.Params.Params
	name := learnableName(w, k)
	if k >= len(params) {
		return nil, fmt.Errorf("nn: learnable %s %v is the %d-th of this graph, but the model has %d parameters: every compilation must create the learnables NewGraphModel found", name, w.Shape(), k+1, len(params))
	}
	p := params[k]
	if p.Name != name || !tensor.Shape(p.Shape).Eq(w.Shape()) {
		return nil, fmt.Errorf("nn: learnable %d is %s %v, but the model's parameter %d is %s %v: every compilation must create the same learnables in the same order", k, name, w.Shape(), k, p.Name, p.Shape)
	}
	if _, dup := b.nodes[p]; dup {
		return nil, fmt.Errorf("nn: parameter %s is already in this graph", p.Name)
	}
	if b.learned == nil {
		b.learned = map[*G.Node]*Param{}
	}
	b.learned[w] = p
	return b.use(p, w)
}

func (b *Builder) discover(w *G.Node) (*G.Node, error) {
	if b.probe.seen[w] {
		return w, nil
	}
	k := len(b.probe.params)
	name := learnableName(w, k)
	if w.Value() == nil {
		return nil, fmt.Errorf("nn: learnable %s has no value: create it with G.WithInit or G.WithValue", name)
	}
	src, ok := w.Value().Data().([]float32)
	if !ok || len(src) != w.Shape().TotalSize() {
		return nil, fmt.Errorf("nn: learnable %s holds %T, want %d float32", name, w.Value().Data(), w.Shape().TotalSize())
	}
	for _, q := range b.probe.params {
		if q.Name == name {
			return nil, fmt.Errorf("nn: two learnables are named %s", name)
		}
	}
	b.probe.seen[w] = true
	b.probe.params = append(b.probe.params, &Param{Name: name, Shape: []int(w.Shape().Clone())})
	b.probe.values = append(b.probe.values, append([]float32(nil), src...))
	return w, nil
}

func learnableName(w *G.Node, k int) string {
	if w.Name() != "" {
		return w.Name()
	}
	return fmt.Sprintf("param%d", k)
}

// NewGraphModel builds a model from a plain gorgonia build function (see Builder.Learnable):
// it runs build once in train mode on a scratch graph, and allocates the learnables it adopts,
// in adoption order, as the model's parameters with the values build gave them. The model
// has no Root module and no buffers. Options are those of NewModel (the seed drives only the
// model's RNG: the learnables' values are build's own).
func NewGraphModel(build BuildFunc, opts ...ModelOption) (*Model, error) {
	cfg := modelConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	pr := &probe{seen: map[*G.Node]bool{}}
	compileMu.Lock()
	b := &Builder{
		Graph: G.NewGraph(), Model: &Model{Params: &ParamSet{}}, cfg: buildConfig{training: true},
		nodes: map[*Param]*G.Node{}, leaves: map[*Param]*G.Node{},
		inputs: map[string]*G.Node{}, outputs: map[string]*G.Node{}, probe: pr,
	}
	_, err := build(b)
	compileMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("nn: discovering the graph's learnables: %w", err)
	}
	if len(pr.params) == 0 {
		return nil, fmt.Errorf("nn: the build function adopted no learnable (call b.Learnable on each)")
	}
	ps, err := NewParamSet((*rand.Rand)(nil), pr.params, nil)
	if err != nil {
		return nil, err
	}
	for i, p := range ps.Params {
		copy(p.Data, pr.values[i])
	}
	if err := cfg.allocGrad(ps); err != nil {
		return nil, err
	}
	return &Model{Params: ps, RNG: ops.NewRNG(uint64(cfg.seed))}, nil
}

// checkLearnablesUse fails when the forward reads an adopted learnable itself instead of the
// node Learnable returned: its gradient would bypass the tap (and DDP's reduction, ZeRO's
// gather), so the learnable would train on this rank's gradient alone or not at all.
func (b *Builder) checkLearnablesUse() error {
	for w, p := range b.learned {
		use := b.nodes[p]
		if use == w {
			continue // nothing between the learnable and the forward (evaluation, no hooks)
		}
		for it := b.Graph.To(w.ID()); it.Next(); {
			n := it.Node().(*G.Node)
			if n != use && !b.wraps(n, w) {
				return fmt.Errorf("nn: learnable %s is read directly by %s: the forward must use the node b.Learnable(%s) returned", w.Name(), n.Name(), w.Name())
			}
		}
	}
	return nil
}

// wraps reports whether n is one of the nodes Learnable put between w and the forward (the
// tap and the parameter hooks' ops take w or each other as their input).
func (b *Builder) wraps(n, w *G.Node) bool {
	use := b.nodes[b.learned[w]]
	for m := use; m != nil && m != w; {
		if m == n {
			return true
		}
		kids := b.Graph.From(m.ID())
		if kids.Len() != 1 || !kids.Next() {
			return false
		}
		m = kids.Node().(*G.Node)
	}
	return false
}
