// Package gormlp is the plain gorgonia two-layer perceptron the wrapping tests, examples and
// benchmarks share: written as gorgonia's own examples write one (G.NewMatrix learnables,
// G.Grad, a TapeMachine, a solver), once as a stand-alone program and once as the build
// function of package nn's graph models, so that the two can be compared bit for bit.
package gormlp

import (
	"fmt"
	"math/rand"

	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// In, Hidden and Out are the layer widths.
const (
	In     = 4
	Hidden = 16
	Out    = 1
)

// InitValues returns the initial weights for a seed: w1 [In,Hidden], w2 [Hidden,Out].
func InitValues(seed int64) (w1, w2 []float32) {
	rng := rand.New(rand.NewSource(seed))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64()) * 0.5
		}
		return v
	}
	return randn(In * Hidden), randn(Hidden * Out)
}

// Data fills x [n,In] and y [n,Out] with samples first..first+n-1 of a fixed stream:
// y = sin(x0) + x1·x2 - x3/2. Sample i is the same whoever asks for it, so rank r of a
// world of w that reads samples step*w*n + r*n .. sees exactly its part of the global batch.
func Data(x, y []float32, first, n int) {
	for i := range n {
		rng := rand.New(rand.NewSource(int64(first+i) + 1))
		var xi [In]float32
		for j := range xi {
			xi[j] = float32(rng.NormFloat64())
			x[In*i+j] = xi[j]
		}
		y[i] = sin(xi[0]) + xi[1]*xi[2] - xi[3]/2
	}
}

func sin(v float32) float32 {
	// a short odd polynomial: the data only need to be a fixed smooth function
	x := float64(v)
	return float32(x - x*x*x/6 + x*x*x*x*x/120)
}

// Net is the graph of one batch: inputs, learnables, forward and loss.
type Net struct {
	X, Y   *G.Node
	W1, W2 *G.Node
	Loss   *G.Node
}

// Forward builds the forward on g from the inputs and the learnables as the forward reads
// them (w1, w2 may be the learnables themselves or what nn's Builder.Learnable returned).
func Forward(x, y, w1, w2 *G.Node) (*G.Node, error) {
	h, err := G.Rectify(G.Must(G.Mul(x, w1)))
	if err != nil {
		return nil, err
	}
	d, err := G.Sub(G.Must(G.Mul(h, w2)), y)
	if err != nil {
		return nil, err
	}
	return G.Mean(G.Must(G.Square(d)))
}

// Learnables creates w1 and w2 on g with the values of seed.
func Learnables(g *G.ExprGraph, seed int64) (w1, w2 *G.Node) {
	v1, v2 := InitValues(seed)
	w1 = G.NewMatrix(g, tensor.Float32, G.WithShape(In, Hidden), G.WithName("w1"), G.WithValue(tensor.New(tensor.WithShape(In, Hidden), tensor.WithBacking(v1))))
	w2 = G.NewMatrix(g, tensor.Float32, G.WithShape(Hidden, Out), G.WithName("w2"), G.WithValue(tensor.New(tensor.WithShape(Hidden, Out), tensor.WithBacking(v2))))
	return w1, w2
}

// Build is the nn build function of the perceptron for batches of n samples: inputs "x" and
// "y", learnables w1 and w2 (initial values of seed) adopted through b.Learnable.
func Build(seed int64) func(b *nn.Builder, n int) (*G.Node, error) {
	return func(b *nn.Builder, n int) (*G.Node, error) {
		x, err := b.Input("x", n, In)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("y", n, Out)
		if err != nil {
			return nil, err
		}
		w1, w2 := Learnables(b.Graph, seed)
		u1, err := b.Learnable(w1)
		if err != nil {
			return nil, err
		}
		u2, err := b.Learnable(w2)
		if err != nil {
			return nil, err
		}
		return Forward(x, y, u1, u2)
	}
}

// Fixed is Build for a fixed batch size.
func Fixed(seed int64, n int) nn.BuildFunc {
	f := Build(seed)
	return func(b *nn.Builder) (*G.Node, error) { return f(b, n) }
}

// Plain is the stand-alone gorgonia program: its own graph, G.Grad, a TapeMachine with
// dual values bound, stepped by a gorgonia solver.
type Plain struct {
	Net
	G     *G.ExprGraph
	VM    G.VM
	Batch int
}

// NewPlain builds the stand-alone program for batches of n.
func NewPlain(seed int64, n int) (*Plain, error) {
	g := G.NewGraph()
	p := &Plain{G: g, Batch: n}
	p.X = G.NewMatrix(g, tensor.Float32, G.WithShape(n, In), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(n, In), tensor.WithBacking(make([]float32, n*In)))))
	p.Y = G.NewMatrix(g, tensor.Float32, G.WithShape(n, Out), G.WithName("y"), G.WithValue(tensor.New(tensor.WithShape(n, Out), tensor.WithBacking(make([]float32, n*Out)))))
	p.W1, p.W2 = Learnables(g, seed)
	var err error
	if p.Loss, err = Forward(p.X, p.Y, p.W1, p.W2); err != nil {
		return nil, err
	}
	if _, err = G.Grad(p.Loss, p.W1, p.W2); err != nil {
		return nil, fmt.Errorf("gormlp: %w", err)
	}
	p.VM = G.NewTapeMachine(g, G.BindDualValues(p.W1, p.W2))
	return p, nil
}

// Step runs the samples first..first+Batch-1 and steps s; it returns the loss.
func (p *Plain) Step(s G.Solver, first int) (float32, error) {
	Data(p.X.Value().Data().([]float32), p.Y.Value().Data().([]float32), first, p.Batch)
	p.VM.Reset()
	if err := p.VM.RunAll(); err != nil {
		return 0, err
	}
	if err := s.Step(G.NodesToValueGrads(G.Nodes{p.W1, p.W2})); err != nil {
		return 0, err
	}
	return p.Loss.Value().Data().(float32), nil
}

// Weights returns a copy of w1 and w2, concatenated.
func Weights(w1, w2 *G.Node) []float32 {
	out := append([]float32(nil), w1.Value().Data().([]float32)...)
	return append(out, w2.Value().Data().([]float32)...)
}

// Solvers are gorgonia's solvers the tests run, by name, each new at every call: all of
// v0.9.18's that step float32 weights (BarzilaiBorwein fails on float32 with a dtype error,
// on its own as under any wrapper; AdamW does nothing, see NoOpSolvers).
var Solvers = []struct {
	Name string
	New  func() G.Solver
}{
	{"vanilla", func() G.Solver { return G.NewVanillaSolver(G.WithLearnRate(0.05)) }},
	{"momentum", func() G.Solver { return G.NewMomentum(G.WithLearnRate(0.02), G.WithMomentum(0.9)) }},
	{"adam", func() G.Solver { return G.NewAdamSolver(G.WithLearnRate(0.01)) }},
	{"rmsprop", func() G.Solver { return G.NewRMSPropSolver(G.WithLearnRate(0.005)) }},
	{"adagrad", func() G.Solver { return G.NewAdaGradSolver(G.WithLearnRate(0.05)) }},
}

// NoOpSolvers are gorgonia v0.9.18 solvers that do not update the weights at all, so that
// an equivalence test with them would prove nothing: AdamW's Step computes the decayed
// weights into a new tensor (tensor.Mul without UseUnsafe) and adds the update to that
// copy, leaving the node's value as it was. A test asserts that they still do nothing
// (TestNoOpSolversStillNoOp): when a newer gorgonia fixes one, move it to Solvers.
var NoOpSolvers = []struct {
	Name string
	New  func() G.Solver
}{
	{"adamw", func() G.Solver { return G.NewAdamW(G.WithLearnRate(0.01)) }},
}
