package nn

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ParamHook is called once per parameter, when a graph first uses it, with the parameter's
// leaf node. It returns the node the forward computation uses in its place: autocast puts a
// rounding op there, ZeRO-3 a gather. Hooks run in the order they were given.
type ParamHook func(b *Builder, p *Param, n *G.Node) (*G.Node, error)

// GradHook is called during backward, right after p's gradient has been accumulated into the
// program's gradient buffer, in the order backward produces gradients. DDP marks the
// gradient ready there. An error stops the run and is returned from Program.Run.
type GradHook func(p *Param) error

type buildConfig struct {
	training       bool
	paramHooks     []ParamHook
	gradHooks      []GradHook
	gradBuf        []float32
	privateBuffers bool
	reducer        ops.StatsReducer
	cast           CastPolicy
	backing        func(*Param) []float32
	sink           func(p *Param, grad []float32) error
	optimizer      Updater
	solver         G.Solver
}

// Updater is an optimizer as Program.Step needs it: optim's optimizers satisfy it.
type Updater interface {
	// Step updates the parameters from their gradients.
	Step() error
}

// WithOptimizer makes opt the update of Program.Step (an optimizer of package optim over the
// model's parameters).
func WithOptimizer(opt Updater) BuildOption { return func(c *buildConfig) { c.optimizer = opt } }

// WithSolver makes a gorgonia solver (G.NewVanillaSolver, G.NewAdamSolver, ...) the update of
// Program.Step: it steps G.NodesToValueGrads(Learnables()), whose values are the model's
// parameters and whose gradients the program's gradient buffer.
func WithSolver(s G.Solver) BuildOption { return func(c *buildConfig) { c.solver = s } }

// BuildOption configures Compile.
type BuildOption func(*buildConfig)

// Updates returns the optimizer (WithOptimizer) and the gorgonia solver (WithSolver) that opts
// give, nil where they give none: for an engine that steps somewhere other than
// Program.Update (cuda/devdp's master device) and reads the optimizer from the build options
// its caller gave, the one place every strategy takes it.
func Updates(opts ...BuildOption) (Updater, G.Solver) {
	var c buildConfig
	for _, o := range opts {
		o(&c)
	}
	return c.optimizer, c.solver
}

// Training selects train mode (the default: batch statistics, dropout on, gradients) or eval
// mode (running statistics, dropout off, no gradients).
func Training(on bool) BuildOption { return func(c *buildConfig) { c.training = on } }

// WithParamHook adds a hook on every parameter node (see ParamHook).
func WithParamHook(h ParamHook) BuildOption {
	return func(c *buildConfig) { c.paramHooks = append(c.paramHooks, h) }
}

// WithGradHook adds a hook that runs when each gradient is ready (see GradHook).
func WithGradHook(h GradHook) BuildOption {
	return func(c *buildConfig) { c.gradHooks = append(c.gradHooks, h) }
}

// WithGradBuffer makes the program accumulate gradients into buf, which has the layout of
// ParamSet.Grad, instead of into ParamSet.Grad. DataParallel gives each replica its own.
func WithGradBuffer(buf []float32) BuildOption { return func(c *buildConfig) { c.gradBuf = buf } }

// WithParamBacking makes each parameter's leaf node hold backing(p) (len(p.Data) values)
// instead of p.Data. ZeRO-3, whose full parameters exist only while gathered, binds the leaves
// to memory that is never read and replaces them with a gather in a ParamHook.
func WithParamBacking(backing func(p *Param) []float32) BuildOption {
	return func(c *buildConfig) { c.backing = backing }
}

// WithGradSink hands each parameter's gradient to sink, during backward, instead of adding it
// into the gradient buffer; grad is valid only during the call. Gradient hooks run after the
// sink. ZeRO-3 writes gradients straight into its reduce-scatter buffers so.
func WithGradSink(sink func(p *Param, grad []float32) error) BuildOption {
	return func(c *buildConfig) { c.sink = sink }
}

// WithPrivateBuffers makes normalisation layers update private copies of their running
// statistics instead of the model's buffers (DataParallel replicas other than the first).
func WithPrivateBuffers() BuildOption { return func(c *buildConfig) { c.privateBuffers = true } }

// WithStatsReducer turns every BatchNorm layer into a SyncBatchNorm that reduces its
// statistics through r (DDP passes an all-reduce over its process group).
func WithStatsReducer(r ops.StatsReducer) BuildOption { return func(c *buildConfig) { c.reducer = r } }

// Builder builds a model into one graph. Modules get their parameter nodes from it, learn
// the mode from it, and register inputs and outputs with it.
type Builder struct {
	// Graph is the graph being built.
	Graph *G.ExprGraph
	// Model is the model being built.
	Model *Model

	cfg     buildConfig
	nodes   map[*Param]*G.Node // what the forward uses (after hooks)
	leaves  map[*Param]*G.Node // the leaf nodes bound to Param.Data
	used    []*Param           // parameters in order of first use
	inputs  map[string]*G.Node
	outputs map[string]*G.Node
	fired   []bool // per used parameter: its gradient hook ran in this run
	// replace makes the first gradient of each parameter in this run overwrite its slice of
	// the gradient buffer instead of adding to it (Program.RunZeroed).
	replace bool

	// probe collects the learnables of a plain gorgonia graph while NewGraphModel discovers
	// them; nil when compiling.
	probe *probe
	// learned maps each learnable adopted by Learnable to its parameter.
	learned map[*G.Node]*Param
	// constants maps each node adopted by Constant to the model's buffer of it.
	constants map[*G.Node]*Buffer
	// marks records the ops the build function autocast itself (autocast_graph.go).
	marks autocastMarks
}

// Training reports whether the graph is built in train mode.
func (b *Builder) Training() bool { return b.cfg.training }

// Param returns the node that the forward computation uses for p, creating it on first use:
// a leaf bound to p.Data (no copy), wrapped by the gradient tap in train mode and by the
// parameter hooks.
func (b *Builder) Param(p *Param) (*G.Node, error) {
	if n, ok := b.nodes[p]; ok {
		return n, nil
	}
	if b.Model.Params.Param(p.Name) != p {
		return nil, fmt.Errorf("nn: parameter %s does not belong to this model", p.Name)
	}
	leaf := G.NewTensor(b.Graph, tensor.Float32, len(p.Shape), G.WithShape(p.Shape...), G.WithName(p.Name))
	return b.use(p, leaf)
}

// use binds leaf to p's memory (or the WithParamBacking memory), records it as p's leaf and
// returns the node the forward uses in its place: leaf through the gradient tap (train mode)
// and the parameter hooks.
func (b *Builder) use(p *Param, leaf *G.Node) (*G.Node, error) {
	backing := p.Data
	if b.cfg.backing != nil {
		if backing = b.cfg.backing(p); len(backing) != len(p.Data) {
			return nil, fmt.Errorf("nn: parameter backing of %s has %d values, want %d", p.Name, len(backing), len(p.Data))
		}
	}
	val := tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(backing))
	if err := G.Let(leaf, val); err != nil {
		return nil, fmt.Errorf("nn: binding %s to its parameter memory: %w", p.Name, err)
	}
	n := leaf
	idx := len(b.used)
	if b.cfg.training {
		var err error
		n, err = Tap(leaf, b.gradFunc(p, idx))
		if err != nil {
			return nil, err
		}
	}
	for _, h := range b.cfg.paramHooks {
		var err error
		if n, err = h(b, p, n); err != nil {
			return nil, fmt.Errorf("nn: parameter hook on %s: %w", p.Name, err)
		}
	}
	b.nodes[p] = n
	b.leaves[p] = leaf
	b.used = append(b.used, p)
	b.fired = append(b.fired, false)
	return n, nil
}

func (b *Builder) gradFunc(p *Param, idx int) GradFunc {
	return func(v G.Value) error {
		g, ok := v.Data().([]float32)
		if !ok || len(g) != len(p.Data) {
			return fmt.Errorf("nn: gradient of %s: got %T of %d elements, want %d float32", p.Name, v.Data(), v.Shape().TotalSize(), len(p.Data))
		}
		if b.cfg.sink != nil {
			if err := b.cfg.sink(p, g); err != nil {
				return err
			}
		} else {
			// AVX-512 where the CPU has it, else a Go loop unrolled by 8, big tensors split
			// across threads: resnet18 adds 11.7M elements a step. Under RunZeroed the
			// first arrival is written as g + 0 instead, which ZeroGrad's zeros plus g are
			// bit for bit (a -0 becomes +0 and a NaN is quieted alike), without the pass
			// that wrote the zeros, with stores that bypass the cache: it reads neither the
			// old gradient nor, to own its lines, the destination.
			dst := b.cfg.gradBuf[p.Offset : p.Offset+len(g)]
			if b.replace && !b.fired[idx] {
				splitChunks(len(g), func(lo, hi int) { simd.PlusZeroNT(dst[lo:hi], g[lo:hi]) })
			} else {
				splitChunks(len(g), func(lo, hi int) { simd.AddTo(dst[lo:hi], g[lo:hi]) })
			}
		}
		b.fired[idx] = true
		for _, h := range b.cfg.gradHooks {
			if err := h(p); err != nil {
				return err
			}
		}
		return nil
	}
}

// Input declares a float32 input of the given shape, named name ("images", "labels").
func (b *Builder) Input(name string, shape ...int) (*G.Node, error) {
	if _, dup := b.inputs[name]; dup {
		return nil, fmt.Errorf("nn: input %q declared twice", name)
	}
	n, err := numel(shape)
	if err != nil {
		return nil, fmt.Errorf("nn: input %q: %w", name, err)
	}
	val := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]float32, n)))
	node := G.NewTensor(b.Graph, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(val))
	b.inputs[name] = node
	return node, nil
}

// Output names a node whose value the program exposes after each run ("logits").
func (b *Builder) Output(name string, n *G.Node) { b.outputs[name] = n }

// Forward builds the model's root module on x.
func (b *Builder) Forward(x *G.Node) (*G.Node, error) {
	if b.Model.Root == nil {
		return nil, fmt.Errorf("nn: Forward: the model has no root module (a plain gorgonia model builds its forward itself)")
	}
	return b.Model.Root.Forward(b, x)
}

// RNG is the model's random source for Dropout and DropPath.
func (b *Builder) RNG() *ops.RNG { return b.Model.RNG }

// BNState returns the state a BatchNorm op of this graph uses: the model's buffers, or
// private copies under WithPrivateBuffers; the graph's mode; the SyncBatchNorm reducer.
func (b *Builder) BNState(mean, variance, tracked *Buffer, momentum, eps float64) *ops.BNState {
	st := &ops.BNState{
		RunningMean:       mean.Data,
		RunningVar:        variance.Data,
		NumBatchesTracked: tracked.Int64,
		Momentum:          momentum,
		Eps:               eps,
		Training:          b.cfg.training,
		Reducer:           b.cfg.reducer,
	}
	if b.cfg.privateBuffers {
		st.RunningMean = append([]float32(nil), mean.Data...)
		st.RunningVar = append([]float32(nil), variance.Data...)
		st.NumBatchesTracked = append([]int64(nil), tracked.Int64...)
	}
	return st
}

// UsedParams lists the parameters the graph uses, in order of first use.
func (b *Builder) UsedParams() []*Param { return b.used }

// Leaf returns the leaf node bound to p's memory, or nil when the graph does not use p.
func (b *Builder) Leaf(p *Param) *G.Node { return b.leaves[p] }
