package ops

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestNormLayerGradcheck(t *testing.T) {
	for _, tc := range []struct {
		shape []int
		dims  int
	}{
		{[]int{2, 5, 6}, 1}, {[]int{1, 7}, 1}, {[]int{3, 2, 3, 5}, 2}, {[]int{2, 3, 4}, 3}, {[]int{4, 3, 1}, 1},
	} {
		for _, affine := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/last%d/affine=%v", tc.shape, tc.dims, affine), func(t *testing.T) {
				// [4,3,1] over 1 dim: one element per row normalises to 0, so dx is exactly 0,
				// which the check verifies too.
				checkOp(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
					x := gradcheck.Input(g, dt, rng, "x", tc.shape...)
					in := G.Nodes{x}
					var gamma, beta *G.Node
					if affine {
						last := tc.shape[len(tc.shape)-tc.dims:]
						gamma = gradcheck.Input(g, dt, rng, "gamma", last...)
						beta = gradcheck.Input(g, dt, rng, "beta", last...)
						in = append(in, gamma, beta)
					}
					y, err := LayerNorm(x, gamma, beta, tc.dims, 1e-5)
					return in, y, err
				}, gradBound)
			})
		}
	}
}

func TestNormLayerErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 3, 4), G.WithName("x"))
	w := G.NewTensor(g, tensor.Float32, 1, G.WithShape(3), G.WithName("w"))
	cases := []struct {
		f    func() (*G.Node, error)
		want string
	}{
		{func() (*G.Node, error) { return LayerNorm(x, w, w, 1, 1e-5) }, "LayerNorm: input (2, 3, 4) over 1 dims wants gamma and beta (4), got (3) and (3)"},
		{func() (*G.Node, error) { return LayerNorm(x, nil, nil, 4, 1e-5) }, "LayerNorm: input (2, 3, 4) cannot be normalised over its last 4 dims"},
		{func() (*G.Node, error) { return LayerNorm(x, nil, w, 1, 1e-5) }, "both"},
	}
	for _, c := range cases {
		if _, err := c.f(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", err, c.want)
		}
	}
}
