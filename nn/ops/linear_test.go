package ops

import (
	"fmt"
	"math/rand"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestLinearGradcheck(t *testing.T) {
	cases := []struct {
		name string
		x, w []int
		bias bool
	}{
		{"2d", []int{3, 5}, []int{4, 5}, true},
		{"batch1 nobias", []int{1, 7}, []int{3, 7}, false},
		{"3d", []int{2, 3, 5}, []int{4, 5}, true},
		{"4d nobias", []int{2, 1, 3, 5}, []int{6, 5}, false},
		{"1d", []int{5}, []int{2, 5}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cvCheck(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
				x := cvIn(g, dt, rng, "x", c.x...)
				w := cvIn(g, dt, rng, "w", c.w...)
				in := G.Nodes{x, w}
				var b *G.Node
				if c.bias {
					b = cvIn(g, dt, rng, "b", c.w[0])
					in = append(in, b)
				}
				y, err := Linear(x, w, b)
				if err == nil && y.Shape()[y.Dims()-1] != c.w[0] {
					err = fmt.Errorf("output shape %v", y.Shape())
				}
				return in, y, err
			}, cvLinearEps)
		})
	}
}

func TestLinearPyTorchFixtures(t *testing.T) {
	f := openCvFixtures(t)
	cases := f.cases("linear_")
	if len(cases) < 2 {
		t.Fatalf("found %d linear fixtures, want 2", len(cases))
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			names := []string{"x", "w"}
			if f.ints(t, c+"__opts")[0] == 1 {
				names = append(names, "b")
			}
			cvCompareFixture(t, f, c, names, func(in G.Nodes) (*G.Node, error) {
				var b *G.Node
				if len(in) == 3 {
					b = in[2]
				}
				return Linear(in[0], in[1], b)
			})
		})
	}
}

func TestLinearBadInput(t *testing.T) {
	g := G.NewGraph()
	node := func(name string, shape ...int) *G.Node {
		return G.NewTensor(g, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name))
	}
	x := node("x", 4, 5)
	_, err := Linear(x, node("w1", 3, 6), nil)
	cvWantErr(t, err, "ops.Linear", "(4, 5)", "(3, 6)")
	_, err = Linear(x, node("w2", 3, 5, 1), nil)
	cvWantErr(t, err, "ops.Linear", "rank 2")
	_, err = Linear(x, node("w3", 3, 5), node("b", 4))
	cvWantErr(t, err, "ops.Linear", "bias", "(4)")
}
