package ops

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func ceBuild(n, k int, s float64) gradcheck.BuildFunc {
	return func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
		x := gradcheck.Input(g, dt, rng, "logits", n, k)
		lab := make([]float64, n)
		for i := range lab {
			lab[i] = float64(rng.Intn(k))
		}
		y := constNode(g, dt, "labels", lab, n)
		loss, err := CrossEntropy(x, y, s)
		return G.Nodes{x}, loss, err
	}
}

func TestLossCrossEntropyGradcheck(t *testing.T) {
	for _, sz := range [][2]int{{4, 10}, {1, 7}, {5, 3}} {
		for _, s := range []float64{0, 0.1, 1} {
			t.Run(fmt.Sprintf("%v/s=%v", sz, s), func(t *testing.T) {
				// The loss is a scalar of order 1 whose gradients can be 1e-5 small: with the
				// default step 1e-6 float64 round-off in the loss (1e-16/1e-6) alone is 1e-6 of
				// such a gradient, so the step is 1e-5 (truncation error ~eps² stays far below).
				checkOpWith(t, ceBuild(sz[0], sz[1], s), gradBound, gradcheck.Options{Samples: 48, Eps: 1e-5})
			})
		}
	}
}

// TestLossCrossEntropyValues compares with the definition written out in float64.
func TestLossCrossEntropyValues(t *testing.T) {
	x := []float64{1, 2, 3, -1, 0.5, 0, 100, 99, 98}
	labels := []float64{2, 0, 1}
	for _, s := range []float64{0, 0.1} {
		var want float64
		for i := 0; i < 3; i++ {
			row := x[i*3 : i*3+3]
			mx := math.Max(row[0], math.Max(row[1], row[2]))
			z := mx + math.Log(math.Exp(row[0]-mx)+math.Exp(row[1]-mx)+math.Exp(row[2]-mx))
			var smooth float64
			for _, v := range row {
				smooth += (z - v) / 3
			}
			want += ((1-s)*(z-row[int(labels[i])]) + s*smooth) / 3
		}
		g := G.NewGraph()
		loss, err := CrossEntropy(constNode(g, tensor.Float64, "x", x, 3, 3), constNode(g, tensor.Float64, "y", labels, 3), s)
		if err != nil {
			t.Fatal(err)
		}
		m := runGraph(t, g)
		if got := f64s(t, loss)[0]; math.Abs(got-want) > 1e-13 {
			t.Errorf("s=%v: loss %v, want %v", s, got, want)
		}
		m.Close()
	}
}

// TestLossCrossEntropyGradValues compares the gradient with its closed form, (softmax -
// (1-s)·onehot - s/K)/N, written out in float64 (softmax as exp(x - log Σ exp x)), on rows
// of small, large (100) and far-apart logits. Float64 agrees to round-off (1e-15); float32
// to its rounding of each element (2^-24 of a gradient at most 1/N, and of the logits).
func TestLossCrossEntropyGradValues(t *testing.T) {
	const n, k = 3, 4
	x := []float64{1, 2, 3, 0.5, 100, 99, 98, 97, -30, 0, 2.5, -1}
	labels := []float64{2, 0, 3}
	for _, tc := range []struct {
		dt  tensor.Dtype
		s   float64
		tol float64
	}{
		{tensor.Float64, 0, 1e-15}, {tensor.Float64, 0.1, 1e-15},
		{tensor.Float32, 0, 1e-7}, {tensor.Float32, 0.1, 1e-7},
	} {
		t.Run(fmt.Sprintf("%v/s=%v", tc.dt, tc.s), func(t *testing.T) {
			g := G.NewGraph()
			xn := G.NewMatrix(g, tc.dt, G.WithShape(n, k), G.WithName("x"), G.WithValue(gradcheck.FromFloat64(tc.dt, x, n, k)))
			loss, err := CrossEntropy(xn, constNode(g, tc.dt, "y", labels, n), tc.s)
			if err != nil {
				t.Fatal(err)
			}
			grads, err := G.Grad(loss, xn)
			if err != nil {
				t.Fatal(err)
			}
			m := runGraph(t, g)
			defer m.Close()
			got := f64s(t, grads[0])
			for i := 0; i < n; i++ {
				row := x[i*k : (i+1)*k]
				mx := math.Max(math.Max(row[0], row[1]), math.Max(row[2], row[3]))
				var sum float64
				for _, v := range row {
					sum += math.Exp(v - mx)
				}
				z := mx + math.Log(sum)
				for j, v := range row {
					want := math.Exp(v-z) - tc.s/k
					if j == int(labels[i]) {
						want -= 1 - tc.s
					}
					want /= n
					if d := got[i*k+j] - want; math.Abs(d) > tc.tol {
						t.Errorf("d loss/d x[%d,%d] = %v, want %v (diff %.2g)", i, j, got[i*k+j], want, d)
					}
				}
			}
		})
	}
}

func TestLossCrossEntropyErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 2, G.WithShape(4, 3), G.WithName("x"))
	y3 := G.NewTensor(g, tensor.Float32, 1, G.WithShape(3), G.WithName("y3"))
	if _, err := CrossEntropy(x, y3, 0); err == nil || !strings.Contains(err.Error(), "CrossEntropy: logits (4, 3) and labels (3), want [N,K] and [N]") {
		t.Errorf("shape error %v", err)
	}
	y := G.NewTensor(g, tensor.Float32, 1, G.WithShape(4), G.WithName("y"))
	if _, err := CrossEntropy(x, y, 1.5); err == nil || !strings.Contains(err.Error(), "label smoothing 1.5") {
		t.Errorf("smoothing error %v", err)
	}
	for _, bad := range []float64{3, -1, 0.5} {
		g := G.NewGraph()
		x := constNode(g, tensor.Float32, "x", make([]float64, 12), 4, 3)
		y := constNode(g, tensor.Float32, "y", []float64{0, 1, bad, 2}, 4)
		if _, err := CrossEntropy(x, y, 0); err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		want := fmt.Sprintf("label %v at index 2 out of range [0,3)", bad)
		if err := m.RunAll(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("label %v: error %v, want %q", bad, err, want)
		}
		m.Close()
	}
}
