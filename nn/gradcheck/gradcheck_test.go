package gradcheck

import (
	"math/rand"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The harness must pass a correct op and catch a wrong one: gorgonia v0.9.18's InverseSqrt
// gradient is known to be wrong (docs/DESIGN.md §1), which makes it the harness's negative
// control.
func TestCheckSeparatesRightFromWrong(t *testing.T) {
	tests := []struct {
		name  string
		op    func(*G.Node) (*G.Node, error)
		wrong bool
	}{
		{"tanh", G.Tanh, false},
		{"sqrt", G.Sqrt, false},
		{"inverse-sqrt (gorgonia bug)", G.InverseSqrt, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
				v := make([]float64, 12)
				for i := range v {
					v[i] = 0.5 + rng.Float64()
				}
				x := G.NewTensor(g, dt, 2, G.WithShape(3, 4), G.WithName("x"), G.WithValue(FromFloat64(dt, v, 3, 4)))
				y, err := tc.op(x)
				return G.Nodes{x}, y, err
			}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if bad := res.MaxRel > 1e-6; bad != tc.wrong {
				t.Fatalf("wrong=%v but %v", tc.wrong, res)
			}
		})
	}
}

func TestPrecision(t *testing.T) {
	rel, err := Precision(func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
		a := Input(g, dt, rng, "a", 3, 5)
		b := Input(g, dt, rng, "b", 5, 2)
		y, err := G.Mul(a, b)
		return G.Nodes{a, b}, y, err
	}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if rel > 1e-6 || rel == 0 {
		t.Fatalf("float32 vs float64 rel %g, want (0, 1e-6]", rel)
	}
}
