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

// softBuild makes random soft targets: rows of a mixup of two smoothed one-hots (summing to
// 1), or, with mass != 1, rows scaled to that mass (the gradient holds for any targets).
func softBuild(n, k int, mass float64) gradcheck.BuildFunc {
	return func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
		x := gradcheck.Input(g, dt, rng, "logits", n, k)
		t := make([]float64, n*k)
		for i := 0; i < n; i++ {
			lam, s := rng.Float64(), 0.1
			for j := 0; j < k; j++ {
				t[i*k+j] = s / float64(k)
			}
			t[i*k+rng.Intn(k)] += lam * (1 - s)
			t[i*k+rng.Intn(k)] += (1 - lam) * (1 - s)
			for j := 0; j < k; j++ {
				t[i*k+j] *= mass
			}
		}
		y := constNode(g, dt, "targets", t, n, k)
		loss, err := SoftCrossEntropy(x, y)
		return G.Nodes{x}, loss, err
	}
}

func TestLossSoftCrossEntropyGradcheck(t *testing.T) {
	for _, sz := range [][2]int{{4, 10}, {1, 7}, {5, 3}} {
		for _, mass := range []float64{1, 0.7} {
			t.Run(fmt.Sprintf("%v/mass=%v", sz, mass), func(t *testing.T) {
				// The step and bound of TestLossCrossEntropyGradcheck, for the same reason.
				checkOpWith(t, softBuild(sz[0], sz[1], mass), gradBound, gradcheck.Options{Samples: 48, Eps: 1e-5})
			})
		}
	}
}

// TestLossSoftCrossEntropyMatchesCrossEntropy: one-hot targets smoothed by s give
// CrossEntropy's loss with label smoothing s, and a mixup of two targets the same mixup of
// the two losses (the loss is linear in the targets). Tolerance 1e-12: float64, the same
// sums in another order.
func TestLossSoftCrossEntropyMatchesCrossEntropy(t *testing.T) {
	const n, k = 3, 4
	x := []float64{1, 2, 3, 0.5, -1, 0.5, 0, 2, 100, 99, 98, 97}
	la, lb := []float64{2, 0, 1}, []float64{3, 3, 0}
	onehot := func(labels []float64, s float64) []float64 {
		t := make([]float64, n*k)
		for i, c := range labels {
			for j := 0; j < k; j++ {
				t[i*k+j] = s / k
			}
			t[i*k+int(c)] += 1 - s
		}
		return t
	}
	loss := func(build func(g *G.ExprGraph) (*G.Node, error)) float64 {
		g := G.NewGraph()
		l, err := build(g)
		if err != nil {
			t.Fatal(err)
		}
		m := runGraph(t, g)
		defer m.Close()
		return f64s(t, l)[0]
	}
	for _, s := range []float64{0, 0.1} {
		ce := func(labels []float64) float64 {
			return loss(func(g *G.ExprGraph) (*G.Node, error) {
				return CrossEntropy(constNode(g, tensor.Float64, "x", x, n, k), constNode(g, tensor.Float64, "y", labels, n), s)
			})
		}
		lam := 0.3
		ta, tb := onehot(la, s), onehot(lb, s)
		mix := make([]float64, n*k)
		for i := range mix {
			mix[i] = lam*ta[i] + (1-lam)*tb[i]
		}
		for _, tc := range []struct {
			name    string
			targets []float64
			want    float64
		}{
			{"one-hot", ta, ce(la)},
			{"mixup", mix, lam*ce(la) + (1-lam)*ce(lb)},
		} {
			got := loss(func(g *G.ExprGraph) (*G.Node, error) {
				return SoftCrossEntropy(constNode(g, tensor.Float64, "x", x, n, k), constNode(g, tensor.Float64, "t", tc.targets, n, k))
			})
			if math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("s=%v %s: loss %v, want %v", s, tc.name, got, tc.want)
			}
		}
	}
}

func TestLossSoftCrossEntropyErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 2, G.WithShape(4, 3), G.WithName("x"))
	y := G.NewTensor(g, tensor.Float32, 2, G.WithShape(4, 2), G.WithName("y"))
	if _, err := SoftCrossEntropy(x, y); err == nil || !strings.Contains(err.Error(), "SoftCrossEntropy: logits (4, 3) and targets (4, 2), want both [N,K]") {
		t.Errorf("shape error %v", err)
	}
}
