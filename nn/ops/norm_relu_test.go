package ops

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestBatchNormReLUGradcheck(t *testing.T) {
	for _, shape := range [][]int{{2, 3, 4, 5}, {3, 5, 1, 1}, {5, 4}} {
		for _, training := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/train=%v", shape, training), func(t *testing.T) {
				checkOp(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
					c := shape[1]
					x := gradcheck.Input(g, dt, rng, "x", shape...)
					gamma := gradcheck.Input(g, dt, rng, "gamma", c)
					beta := gradcheck.Input(g, dt, rng, "beta", c)
					y, err := BatchNormReLU(x, gamma, beta, newBNState(c, training))
					return G.Nodes{x, gamma, beta}, y, err
				}, gradBound)
			})
		}
	}
}

func TestAddReLUGradcheck(t *testing.T) {
	for _, shape := range [][]int{{2, 3, 4, 5}, {7}, {3, 2500}} {
		t.Run(fmt.Sprint(shape), func(t *testing.T) {
			checkOp(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
				a := gradcheck.Input(g, dt, rng, "a", shape...)
				b := gradcheck.Input(g, dt, rng, "b", shape...)
				y, err := AddReLU(a, b)
				return G.Nodes{a, b}, y, err
			}, gradBound)
		})
	}
}

// TestFusedReLUMatchesUnfused: BatchNormReLU equals BatchNorm2d then ReLU, and AddReLU equals
// Add then ReLU, in output and in every input gradient (loss Σ y·r with random r), float32
// and float64, train and eval, bit for bit (bound 0): the fused ops do the same arithmetic.
// The shapes are big enough (2·64·24·24 elements) for the kernels to split across threads.
func TestFusedReLUMatchesUnfused(t *testing.T) {
	shape := []int{2, 64, 24, 24}
	type build func(g *G.ExprGraph, in G.Nodes, fused bool, training bool) (*G.Node, error)
	cases := []struct {
		name   string
		inputs [][]int
		f      build
	}{
		{"BatchNormReLU", [][]int{shape, {64}, {64}}, func(g *G.ExprGraph, in G.Nodes, fused, training bool) (*G.Node, error) {
			st := newBNState(64, training)
			if fused {
				return BatchNormReLU(in[0], in[1], in[2], st)
			}
			y, err := BatchNorm2d(in[0], in[1], in[2], st)
			if err != nil {
				return nil, err
			}
			return ReLU(y)
		}},
		{"AddReLU", [][]int{shape, shape}, func(g *G.ExprGraph, in G.Nodes, fused, _ bool) (*G.Node, error) {
			if fused {
				return AddReLU(in[0], in[1])
			}
			y, err := Add(in[0], in[1])
			if err != nil {
				return nil, err
			}
			return ReLU(y)
		}},
	}
	for _, c := range cases {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			for _, training := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%v/train=%v", c.name, dt, training), func(t *testing.T) {
					var res [2][][]float64
					for k, fused := range []bool{false, true} {
						rng := rand.New(rand.NewSource(5))
						g := G.NewGraph()
						var in G.Nodes
						for i, s := range c.inputs {
							in = append(in, gradcheck.Input(g, dt, rng, fmt.Sprintf("in%d", i), s...))
						}
						y, err := c.f(g, in, fused, training)
						if err != nil {
							t.Fatal(err)
						}
						r := gradcheck.Input(g, dt, rng, "r", shape...)
						loss := cvMust(G.Sum(cvMust(G.HadamardProd(y, r))))
						grads, err := G.Grad(loss, in...)
						if err != nil {
							t.Fatal(err)
						}
						m := G.NewTapeMachine(g)
						if err := m.RunAll(); err != nil {
							t.Fatal(err)
						}
						res[k] = append(res[k], cvF64s(y.Value()))
						for _, gr := range grads {
							res[k] = append(res[k], cvF64s(gr.Value()))
						}
						m.Close()
					}
					for i := range res[0] {
						if e := maxRelDiff(res[1][i], res[0][i]); e != 0 {
							t.Errorf("output %d (0 is y, then the inputs' gradients): fused differs by %.3g", i, e)
						}
					}
				})
			}
		}
	}
}
