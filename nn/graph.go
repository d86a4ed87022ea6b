package nn

import (
	"fmt"
	"math/rand"
	"strings"

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
//
// A weight that must not train goes through b.Constant, which makes it a buffer of the model
// (the same value in every graph and on every rank). Any other node of the build function
// that holds a value but is neither an input nor a learnable nor a constant is an error, and
// so is a G.Grad in the build function (Compile differentiates): both would otherwise train
// something else than meant without a word.

// probe is what NewGraphModel's discovery run records.
type probe struct {
	params []*Param
	values [][]float32
	seen   map[*G.Node]bool
	consts []*Buffer
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
	if w.Graph() != b.Graph {
		return nil, fmt.Errorf("nn: learnable %s belongs to another graph than b.Graph: create it inside the build function, on b.Graph", nodeName(w))
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

// Constant adopts c, a node the build function created on b.Graph holding a float32 value
// that training must not change (a frozen weight, a fixed mask), as the model's next
// constant: a buffer of the model named as c (or "const<k>" when unnamed). No optimizer
// updates it, but every strategy keeps it like the model's other buffers: DDP and ZeRO-3
// copy rank 0's value to every rank and include it in the check that the ranks agree, and
// checkpoints save it. It returns c, whose value is from then on the model's memory of the
// constant (the value c was created with is the model's at NewGraphModel, and replaced by it
// in every compilation, so a weight initialised from the clock is the same in every graph and
// on every rank). Every compilation must adopt the same constants in the same order, with the
// same names and shapes.
func (b *Builder) Constant(c *G.Node) (*G.Node, error) {
	if c == nil {
		return nil, fmt.Errorf("nn: Constant of a nil node")
	}
	if c.Graph() != b.Graph {
		return nil, fmt.Errorf("nn: constant %s belongs to another graph than b.Graph: create it inside the build function, on b.Graph", c.Name())
	}
	if c.Op() != nil || c.Value() == nil {
		return nil, fmt.Errorf("nn: constant %s must be a node without an op that holds a value (G.NewTensor with G.WithInit or G.WithValue)", c.Name())
	}
	src, ok := c.Value().Data().([]float32)
	if !ok || len(src) != c.Shape().TotalSize() {
		return nil, fmt.Errorf("nn: constant %s holds %T, want %d float32", c.Name(), c.Value().Data(), c.Shape().TotalSize())
	}
	if b.constants == nil {
		b.constants = map[*G.Node]*Buffer{}
	}
	if _, ok := b.constants[c]; ok {
		return c, nil
	}
	k := len(b.constants)
	name := c.Name()
	if name == "" {
		name = fmt.Sprintf("const%d", k)
	}
	if b.probe != nil {
		for _, q := range b.probe.consts {
			if q.Name == name {
				return nil, fmt.Errorf("nn: two constants are named %s", name)
			}
		}
		buf := &Buffer{Name: name, Shape: []int(c.Shape().Clone()), Data: append([]float32(nil), src...), Frozen: true}
		b.probe.consts = append(b.probe.consts, buf)
		b.constants[c] = buf
		return c, nil
	}
	var consts []*Buffer
	for _, buf := range b.Model.Params.Buffers {
		if buf.Frozen {
			consts = append(consts, buf)
		}
	}
	if k >= len(consts) {
		return nil, fmt.Errorf("nn: constant %s %v is the %d-th of this graph, but the model has %d constants: every compilation must create the constants NewGraphModel found", name, c.Shape(), k+1, len(consts))
	}
	buf := consts[k]
	if buf.Name != name || !tensor.Shape(buf.Shape).Eq(c.Shape()) {
		return nil, fmt.Errorf("nn: constant %d is %s %v, but the model's constant %d is %s %v: every compilation must create the same constants in the same order", k, name, c.Shape(), k, buf.Name, buf.Shape)
	}
	if err := G.Let(c, tensor.New(tensor.WithShape(buf.Shape...), tensor.WithBacking(buf.Data))); err != nil {
		return nil, fmt.Errorf("nn: binding constant %s to the model's memory: %w", name, err)
	}
	b.constants[c] = buf
	return c, nil
}

// checkPlainGraph refuses, in a plain gorgonia build function's graph, the mistakes that
// would otherwise train something else than the user meant, without a word: a node that
// holds a value but was declared neither an input, a learnable nor a constant (it would
// train as a frozen value that may differ across ranks), and a derivative taken by G.Grad
// (Compile differentiates).
func (b *Builder) checkPlainGraph() error {
	if b.Model.Root != nil {
		return nil // a model of modules: its nodes are the project's own
	}
	known := map[*G.Node]bool{}
	for _, n := range b.inputs {
		known[n] = true
	}
	for n := range b.learned {
		known[n] = true
	}
	for n := range b.constants {
		known[n] = true
	}
	for _, n := range b.leaves {
		known[n] = true
	}
	if b.probe != nil {
		for n := range b.probe.seen {
			known[n] = true
		}
	}
	var wrt *G.Node // a node G.Grad differentiated with respect to, a leaf where one is
	for _, n := range b.Graph.AllNodes() {
		for _, of := range n.DerivOf() {
			if wrt == nil || wrt.Op() != nil && of.Op() == nil {
				wrt = of
			}
		}
	}
	if wrt != nil {
		return fmt.Errorf("nn: the build function takes a derivative (G.Grad, with respect to %s among others): Compile differentiates the loss itself; remove G.Grad from the build function and read each learnable's gradient with Node.Grad() after Run", nodeName(wrt))
	}
	for _, n := range b.Graph.AllNodes() {
		if n.Op() == nil && n.Value() != nil && !known[n] {
			return fmt.Errorf("nn: node %s %v holds a value but is neither an input nor a learnable: pass it to b.Learnable, or b.Constant if it is meant to be frozen (an undeclared weight would train frozen, and differ across ranks when initialised from the clock)", nodeName(n), n.Shape())
		}
	}
	return nil
}

// hintBuildError adds the fix to the errors gorgonia gives for the mistakes a build function
// can make that it cannot name itself.
func hintBuildError(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Can only differentiate with regards to input nodes"):
		return fmt.Errorf("%w (G.Grad in a build function: Compile differentiates the loss itself; remove the G.Grad call and read each learnable's gradient with Node.Grad() after Run)", err)
	case strings.Contains(msg, "Not all children have the same graph"):
		return fmt.Errorf("%w (a node of another graph reached the build function: create every node on b.Graph; a weight created outside the build function belongs to its own graph: create it inside, with G.WithInit or G.WithValue, and pass it to b.Learnable)", err)
	}
	return err
}

func nodeName(n *G.Node) string {
	if n.Name() != "" {
		return n.Name()
	}
	return fmt.Sprintf("#%d", n.ID())
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
	if err == nil {
		err = b.checkPlainGraph()
	}
	compileMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("nn: discovering the graph's learnables: %w", hintBuildError(err))
	}
	if len(pr.params) == 0 {
		return nil, fmt.Errorf("nn: the build function adopted no learnable (call b.Learnable on each)")
	}
	ps, err := NewParamSet((*rand.Rand)(nil), pr.params, pr.consts)
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
