package ops

import (
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestMaxPool2dGradcheck(t *testing.T) {
	cases := []struct {
		name                string
		x                   []int
		kernel, stride, pad [2]int
	}{
		{"3x3 s2 p1", []int{2, 3, 7, 8}, [2]int{3, 3}, [2]int{2, 2}, [2]int{1, 1}},
		{"2x2 s2 odd batch1", []int{1, 2, 7, 5}, [2]int{2, 2}, [2]int{2, 2}, [2]int{0, 0}},
		{"rect s(1,2) p(1,0)", []int{2, 2, 6, 7}, [2]int{3, 2}, [2]int{1, 2}, [2]int{1, 0}},
		{"zero stride means kernel", []int{1, 3, 6, 6}, [2]int{3, 3}, [2]int{}, [2]int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cvCheck(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
				x := cvIn(g, dt, rng, "x", c.x...)
				y, err := MaxPool2d(x, c.kernel, c.stride, c.pad)
				return G.Nodes{x}, y, err
			}, 0)
		})
	}
}

func TestAdaptiveAvgPool2d1AndFlattenGradcheck(t *testing.T) {
	t.Run("gap", func(t *testing.T) {
		cvCheck(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
			x := cvIn(g, dt, rng, "x", 2, 3, 5, 4)
			y, err := AdaptiveAvgPool2d1(x)
			return G.Nodes{x}, y, err
		}, 0)
	})
	t.Run("flatten", func(t *testing.T) {
		cvCheck(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
			x := cvIn(g, dt, rng, "x", 2, 3, 2, 5)
			y, err := Flatten(x)
			if err == nil && !y.Shape().Eq(tensor.Shape{2, 30}) {
				t.Errorf("Flatten shape %v, want (2, 30)", y.Shape())
			}
			return G.Nodes{x}, y, err
		}, 0)
	})
	t.Run("gap then flatten then linear", func(t *testing.T) {
		cvCheck(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
			x := cvIn(g, dt, rng, "x", 3, 4, 3, 3)
			w := cvIn(g, dt, rng, "w", 2, 4)
			h, err := AdaptiveAvgPool2d1(x)
			if err != nil {
				return nil, nil, err
			}
			if h, err = Flatten(h); err != nil {
				return nil, nil, err
			}
			y, err := Linear(h, w, nil)
			return G.Nodes{x, w}, y, err
		}, 0)
	})
}

// TestMaxPool2dTies: with many equal values the gradient goes to the first maximum of each
// window in row-major order (PyTorch's CPU kernel); the fixture maxpool_ties checks it
// against PyTorch, this checks it by hand on a constant image.
func TestMaxPool2dTies(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float64, 4, G.WithShape(1, 1, 3, 3), G.WithName("x"),
		G.WithValue(gradcheck.FromFloat64(tensor.Float64, make([]float64, 9), 1, 1, 3, 3)))
	y := cvMust(MaxPool2d(x, [2]int{2, 2}, [2]int{1, 1}, [2]int{}))
	grads, err := G.Grad(cvMust(G.Sum(y)), x)
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	got := cvF64s(grads[0].Value())
	want := []float64{1, 1, 0, 1, 1, 0, 0, 0, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("dx %v, want %v", got, want)
		}
	}
}

func TestPoolPyTorchFixtures(t *testing.T) {
	f := openCvFixtures(t)
	cases := f.cases("maxpool_")
	if len(cases) < 4 {
		t.Fatalf("found %d maxpool fixtures, want 4", len(cases))
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			o := f.ints(t, c+"__opts")
			cvCompareFixture(t, f, c, []string{"x"}, func(in G.Nodes) (*G.Node, error) {
				return MaxPool2d(in[0], [2]int{o[0], o[1]}, [2]int{o[2], o[3]}, [2]int{o[4], o[5]})
			})
		})
	}
	t.Run("gap", func(t *testing.T) {
		cvCompareFixture(t, f, "gap", []string{"x"}, func(in G.Nodes) (*G.Node, error) {
			return AdaptiveAvgPool2d1(in[0])
		})
	})
}

func TestPoolBadInput(t *testing.T) {
	g := G.NewGraph()
	x3 := G.NewTensor(g, tensor.Float32, 3, G.WithShape(3, 5, 5), G.WithName("x3"))
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(2, 3, 5, 5), G.WithName("x"))
	_, err := MaxPool2d(x3, [2]int{2, 2}, [2]int{2, 2}, [2]int{})
	cvWantErr(t, err, "ops.MaxPool2d", "(3, 5, 5)", "rank 4")
	_, err = MaxPool2d(x, [2]int{2, 2}, [2]int{2, 2}, [2]int{2, 2})
	cvWantErr(t, err, "ops.MaxPool2d", "(2, 3, 5, 5)", "padding")
	_, err = MaxPool2d(x, [2]int{7, 7}, [2]int{1, 1}, [2]int{})
	cvWantErr(t, err, "ops.MaxPool2d", "empty")
	_, err = AdaptiveAvgPool2d1(x3)
	cvWantErr(t, err, "ops.AdaptiveAvgPool2d1", "(3, 5, 5)")
	x1 := G.NewVector(g, tensor.Float32, G.WithShape(5), G.WithName("x1"))
	_, err = Flatten(x1)
	cvWantErr(t, err, "ops.Flatten", "(5)")
}
