package nn

import (
	"context"
	"fmt"
	"sort"
	"sync"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BuildFunc builds a graph with b: it declares inputs, runs the model's forward, names
// outputs, and returns the scalar loss to differentiate (nil for an evaluation graph).
type BuildFunc func(b *Builder) (loss *G.Node, err error)

var compileMu sync.Mutex

// Program is a model compiled into one graph and a tape machine: built once, run per step.
type Program struct {
	// Builder is the builder the graph was made with.
	Builder *Builder
	// Loss is the loss node (nil for an evaluation program).
	Loss *G.Node

	machine G.VM
	graph   *G.ExprGraph    // what the machine runs
	grads   G.Nodes         // by used parameter: the gradient node G.Grad returned (the leaf's deriv)
	views   []*tensor.Dense // by used parameter: the tensor its gradient node is bound to after a run
	aliased []float32       // the buffer views look into
	unused  []*Param        // the model's parameters the graph does not use (RunZeroed zeroes them)
	update  func() error    // the optimizer or solver of WithOptimizer/WithSolver, nil without
}

// Compile builds m with build into a new graph. In train mode (the default) the gradients of
// the loss with respect to every parameter the graph uses are part of the program, computed
// in backward order by the taps. Compile may be called from several goroutines; it builds one
// graph at a time.
func Compile(m *Model, build BuildFunc, opts ...BuildOption) (*Program, error) {
	// gorgonia's graph construction is not safe for concurrent use (it races on global
	// state), so programs are compiled one at a time; running them concurrently is safe.
	compileMu.Lock()
	defer compileMu.Unlock()
	cfg := buildConfig{training: true}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.gradBuf == nil {
		cfg.gradBuf = m.Params.Grad
	} else if len(cfg.gradBuf) != len(m.Params.Grad) {
		return nil, fmt.Errorf("nn: gradient buffer of %d elements for a model of %d parameters", len(cfg.gradBuf), len(m.Params.Grad))
	}
	b := &Builder{
		Graph: G.NewGraph(), Model: m, cfg: cfg,
		nodes: map[*Param]*G.Node{}, leaves: map[*Param]*G.Node{},
		inputs: map[string]*G.Node{}, outputs: map[string]*G.Node{},
	}
	loss, err := build(b)
	if err != nil {
		return nil, hintBuildError(err)
	}
	p := &Program{Builder: b, Loss: loss}
	if err := b.checkLearnablesUse(); err != nil {
		return nil, err
	}
	if err := b.checkPlainGraph(); err != nil {
		return nil, err
	}
	if p.Loss, err = b.autocastGraph(loss); err != nil {
		return nil, err
	}
	loss = p.Loss
	if loss != nil && cfg.training {
		if !loss.IsScalar() {
			return nil, fmt.Errorf("nn: loss must be a scalar, got shape %v", loss.Shape())
		}
		wrt := make(G.Nodes, len(b.used))
		for i, prm := range b.used {
			wrt[i] = b.leaves[prm]
		}
		if len(wrt) > 0 {
			if p.grads, err = G.Grad(loss, wrt...); err != nil {
				return nil, fmt.Errorf("nn: differentiating the loss: %w", err)
			}
		}
	}
	// Run only what the loss, the outputs and the gradients need: an op's SymDiff creates the
	// gradients of all its inputs, and those of inputs that need none (the images fed to the
	// first convolution) would otherwise be computed at every step for nothing.
	roots := G.Nodes{}
	if loss != nil {
		roots = append(roots, loss)
	}
	for _, name := range sortedNames(b.outputs) {
		roots = append(roots, b.outputs[name])
	}
	roots = append(roots, p.grads...)
	keeps, err := keepOutputs(b.Graph, b.outputs)
	if err != nil {
		return nil, err
	}
	roots = append(roots, keeps...)
	g := b.Graph
	if len(roots) > 0 {
		g = g.ExactSubgraphRoots(roots...)
	}
	p.graph = g
	p.machine = G.NewTapeMachine(g, G.WithEngine(engine{}))
	for _, prm := range m.Params.Params {
		if b.leaves[prm] == nil {
			p.unused = append(p.unused, prm)
		}
	}
	if len(p.grads) > 0 {
		if err := p.AliasGrads(cfg.gradBuf); err != nil {
			return nil, err
		}
	}
	switch {
	case cfg.solver != nil && cfg.optimizer != nil:
		return nil, fmt.Errorf("nn: both an optimizer and a gorgonia solver given")
	case cfg.solver != nil:
		vgs := G.NodesToValueGrads(p.Learnables())
		p.update = func() error { return cfg.solver.Step(vgs) }
	case cfg.optimizer != nil:
		p.update = cfg.optimizer.Step
	}
	return p, nil
}

// Run executes the program once: forward, and in train mode backward, accumulating every
// gradient into the gradient buffer. It returns an error naming the parameters whose
// gradients were not computed, which happens when they do not influence the loss.
func (p *Program) Run(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.run()
}

// RunZeroed is ZeroGrad then Run, with one pass over the gradient buffer instead of two:
// the first gradient backward produces for each parameter is written into the buffer (as
// g + 0) instead of added to the zeros ZeroGrad would have written, and the gradients that
// backward did not produce (parameters the graph does not use, or whose gradient did not
// reach the taps) are zeroed once the run ends. When it returns, with or without an error,
// the buffer holds bit for bit what ZeroGrad then Run leave; gradient hooks see the same
// values as under Run, except that a parameter's slice is undefined until its gradient
// arrives. Programs that do not write the buffer (evaluation, WithGradSink) run ZeroGrad
// then Run.
func (p *Program) RunZeroed(ctx context.Context) error {
	b := p.Builder
	if len(p.grads) == 0 || b.cfg.sink != nil {
		if err := p.ZeroGrad(); err != nil {
			return err
		}
		return p.Run(ctx)
	}
	if err := ctx.Err(); err != nil {
		if zerr := p.ZeroGrad(); zerr != nil {
			return zerr
		}
		return err
	}
	b.replace = true
	defer func() {
		b.replace = false
		buf := b.cfg.gradBuf
		for _, prm := range p.unused {
			zeroFloats(buf[prm.Offset : prm.Offset+len(prm.Data)])
		}
		for i, prm := range b.used {
			if !b.fired[i] {
				zeroFloats(buf[prm.Offset : prm.Offset+len(prm.Data)])
			}
		}
	}()
	return p.run()
}

func (p *Program) run() error {
	for i := range p.Builder.fired {
		p.Builder.fired[i] = false
	}
	p.machine.Reset()
	if err := p.machine.RunAll(); err != nil {
		return fmt.Errorf("nn: run: %w", err)
	}
	return p.rebindGrads()
}

// Graph returns the graph the program runs: the part of Builder.Graph that the loss, the
// named outputs and the gradients need, forward and backward (G.Grad's nodes). Another
// executor (cuda/tape) runs it in G.Sort's reverse order, as the TapeMachine does.
func (p *Program) Graph() *G.ExprGraph { return p.graph }

// Learnables returns the leaf node of every parameter the graph uses, in the model's
// registration order: the learnables a plain gorgonia build function adopted (see
// Builder.Learnable), or the leaves Builder.Param created. Their values are the model's
// parameters (updating them in place updates the model) and, in a training program, their
// Node.Grad() is the program's gradient buffer (see AliasGrads): what
// G.NodesToValueGrads(p.Learnables()) hands a gorgonia solver.
func (p *Program) Learnables() G.Nodes {
	var out G.Nodes
	for _, prm := range p.Builder.Model.Params.Params {
		if leaf := p.Builder.leaves[prm]; leaf != nil {
			out = append(out, leaf)
		}
	}
	return out
}

// AliasGrads makes Node.Grad() of every learnable return its slice of buf (laid out like
// ParamSet.Grad), with no copy: gorgonia's solvers then read the gradient there and their
// zeroing after a step clears it. Compile aliases the program's own gradient buffer, and
// every Run renews the binding (the tape rebinds the gradient nodes to its registers);
// DataParallel aliases the master's buffer after its reduction.
func (p *Program) AliasGrads(buf []float32) error {
	if len(buf) != len(p.Builder.Model.Params.Grad) {
		return fmt.Errorf("nn: gradient buffer of %d elements for a model of %d parameters", len(buf), len(p.Builder.Model.Params.Grad))
	}
	if len(buf) > 0 && len(p.aliased) == len(buf) && &p.aliased[0] == &buf[0] {
		// DataParallel aliases the master's buffer after every run: keep the views.
		return p.rebindGrads()
	}
	p.aliased = buf
	p.views = p.views[:0]
	for _, prm := range p.Builder.used {
		view := tensor.New(tensor.WithShape(prm.Shape...), tensor.WithBacking(buf[prm.Offset:prm.Offset+len(prm.Data)]))
		p.views = append(p.views, view)
	}
	return p.rebindGrads()
}

func (p *Program) rebindGrads() error {
	for i, n := range p.grads {
		if i >= len(p.views) {
			break
		}
		if err := G.UnsafeLet(n, p.views[i]); err != nil {
			return fmt.Errorf("nn: binding the gradient of %s: %w", p.Builder.used[i].Name, err)
		}
	}
	return nil
}

// Step applies the optimizer (WithOptimizer) or gorgonia solver (WithSolver) the program was
// compiled with to the gradients, then zeroes them: the same verb as ddp's, dp's and zero's
// Step (package train). Without either it is an error.
func (p *Program) Step(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.update == nil {
		return fmt.Errorf("nn: Step: the program has no optimizer (compile it with nn.WithOptimizer or nn.WithSolver)")
	}
	if err := p.update(); err != nil {
		return fmt.Errorf("nn: optimizer step: %w", err)
	}
	return p.ZeroGrad()
}

// ZeroGrad zeroes the program's gradient buffer (the model's, unless WithGradBuffer gave
// another). Gradients accumulate over Runs until Step or ZeroGrad, as in PyTorch and as
// gorgonia's dual values do until a solver's step.
func (p *Program) ZeroGrad() error {
	zeroFloats(p.Builder.cfg.gradBuf)
	return nil
}

// HasUpdate reports whether the program was compiled with an optimizer or a solver.
func (p *Program) HasUpdate() bool { return p.update != nil }

// Update applies the program's optimizer or solver without zeroing the gradients (strategies
// that wrap the program build their Step on it).
func (p *Program) Update() error {
	if p.update == nil {
		return fmt.Errorf("nn: the program has no optimizer (compile it with nn.WithOptimizer or nn.WithSolver)")
	}
	return p.update()
}

// Unreached lists the parameters the graph uses whose gradient did not reach the taps in the
// last run (a parameter that does not influence the loss). DDP turns this into an error.
func (p *Program) Unreached() []*Param {
	if p.Loss == nil || !p.Builder.cfg.training {
		return nil
	}
	var out []*Param
	for i, prm := range p.Builder.used {
		if !p.Builder.fired[i] {
			out = append(out, prm)
		}
	}
	return out
}

// Input returns the memory of the named input: write the step's data into it before Run.
func (p *Program) Input(name string) ([]float32, error) {
	n, ok := p.Builder.inputs[name]
	if !ok {
		return nil, fmt.Errorf("nn: no input named %q", name)
	}
	return n.Value().Data().([]float32), nil
}

// SetInput copies data into the named input; its length must equal the input's size.
func (p *Program) SetInput(name string, data []float32) error {
	dst, err := p.Input(name)
	if err != nil {
		return err
	}
	if len(data) != len(dst) {
		return fmt.Errorf("nn: input %q holds %d values (shape %v), got %d", name, len(dst), p.Builder.inputs[name].Shape(), len(data))
	}
	copy(dst, data)
	return nil
}

// InputNames lists the program's inputs, sorted.
func (p *Program) InputNames() []string { return sortedNames(p.Builder.inputs) }

// OutputNames lists the program's named outputs, sorted.
func (p *Program) OutputNames() []string { return sortedNames(p.Builder.outputs) }

func sortedNames(m map[string]*G.Node) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// InputShape returns the shape of the named input, or nil.
func (p *Program) InputShape(name string) []int {
	if n, ok := p.Builder.inputs[name]; ok {
		return []int(n.Shape().Clone())
	}
	return nil
}

// Output returns the value of the named output after the last Run. The slice aliases the
// program's memory and is valid until the next Run.
func (p *Program) Output(name string) ([]float32, error) {
	n, ok := p.Builder.outputs[name]
	if !ok {
		return nil, fmt.Errorf("nn: no output named %q", name)
	}
	return values32(n)
}

// OutputNode returns the node named name with Builder.Output, or nil.
func (p *Program) OutputNode(name string) *G.Node { return p.Builder.outputs[name] }

// LossValue returns the loss of the last Run.
func (p *Program) LossValue() (float32, error) {
	if p.Loss == nil {
		return 0, fmt.Errorf("nn: program has no loss")
	}
	v, err := values32(p.Loss)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// Close releases the tape machine.
func (p *Program) Close() error {
	p.machine.Close()
	return nil
}

func values32(n *G.Node) ([]float32, error) {
	v := n.Value()
	if v == nil {
		return nil, fmt.Errorf("nn: %s has no value (run the program first)", n.Name())
	}
	switch d := v.Data().(type) {
	case []float32:
		return d, nil
	case float32:
		return []float32{d}, nil
	}
	if t, ok := v.(tensor.Tensor); ok {
		return nil, fmt.Errorf("nn: %s holds %v, want float32", n.Name(), t.Dtype())
	}
	return nil, fmt.Errorf("nn: %s holds %T, want float32", n.Name(), v.Data())
}

// Optimizer returns the optimizer given with WithOptimizer, or nil.
func (p *Program) Optimizer() Updater { return p.Builder.cfg.optimizer }
