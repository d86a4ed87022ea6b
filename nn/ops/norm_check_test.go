package ops

import (
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gradBound is the float64 central-difference bound every op here must meet; the harness
// (eps 1e-6) reaches about 1e-8 on smooth ops, so 1e-6 leaves room for cancellation.
const gradBound = 1e-6

// precBound is the float32-vs-float64 bound (norm-wise over output and input gradients).
const precBound = 1e-5

// checkOp runs gradcheck.Check and gradcheck.Precision on build and fails t when either
// bound is exceeded.
func checkOp(t *testing.T, build gradcheck.BuildFunc, bound float64) {
	t.Helper()
	checkOpWith(t, build, bound, gradcheck.Options{Samples: 48})
}

// checkOpWith is checkOp with explicit gradcheck options.
func checkOpWith(t *testing.T, build gradcheck.BuildFunc, bound float64, opts gradcheck.Options) {
	t.Helper()
	res, err := gradcheck.Check(build, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.MaxRel > bound {
		t.Errorf("gradcheck: %v, want <= %g", res, bound)
	}
	rel, err := gradcheck.Precision(build, 7)
	if err != nil {
		t.Fatal(err)
	}
	if rel > precBound {
		t.Errorf("float32 vs float64: rel %g, want <= %g", rel, precBound)
	}
}

// unaryBuild builds f(x) for x of the given shape.
func unaryBuild(f func(*G.Node) (*G.Node, error), shape ...int) gradcheck.BuildFunc {
	return func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
		x := gradcheck.Input(g, dt, rng, "x", shape...)
		y, err := f(x)
		return G.Nodes{x}, y, err
	}
}

// runGraph compiles and runs g once, returning the machine for further runs.
func runGraph(t testing.TB, g *G.ExprGraph) G.VM {
	t.Helper()
	m := G.NewTapeMachine(g)
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	return m
}

// f64s returns a node's value as float64s.
func f64s(t testing.TB, n *G.Node) []float64 {
	t.Helper()
	switch d := n.Value().Data().(type) {
	case []float64:
		return append([]float64(nil), d...)
	case []float32:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out
	case float64:
		return []float64{d}
	case float32:
		return []float64{float64(d)}
	}
	t.Fatalf("unexpected value %T", n.Value().Data())
	return nil
}

// constNode returns a float node holding v with the given shape.
func constNode(g *G.ExprGraph, dt tensor.Dtype, name string, v []float64, shape ...int) *G.Node {
	return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(gradcheck.FromFloat64(dt, v, shape...)))
}
