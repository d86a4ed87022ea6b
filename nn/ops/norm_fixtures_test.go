package ops

import (
	"testing"

	"codeberg.org/sbinet/npyio/npz"
	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Tolerances against PyTorch (float64 references from float32 inputs, see
// testdata/make_norm_fixtures.py), norm-wise relative: our float32 forward within 1e-5 and
// gradients within 1e-4, float32 rounding of inputs, parameters and outputs being ~6e-8 each.
const (
	fixFwdTol  = 1e-5
	fixGradTol = 1e-4
)

// normFixtures reads testdata/norm_fixtures.npz.
type normFixtures struct{ r *npz.Reader }

func openNormFixtures(t *testing.T) *normFixtures {
	t.Helper()
	r, err := npz.Open("testdata/norm_fixtures.npz")
	if err != nil {
		t.Fatalf("norm fixtures: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return &normFixtures{r: r}
}

// get returns key's values as float64 and its shape.
func (f *normFixtures) get(t *testing.T, key string) ([]float64, []int) {
	t.Helper()
	h := f.r.Header(key + ".npy")
	if h == nil {
		t.Fatalf("fixture %s missing", key)
	}
	// The script writes float32 inputs, float64 references and int64 counters.
	var v []float64
	var w32 []float32
	var w64 []int64
	switch {
	case f.r.Read(key+".npy", &v) == nil:
	case f.r.Read(key+".npy", &w32) == nil:
		for _, x := range w32 {
			v = append(v, float64(x))
		}
	case f.r.Read(key+".npy", &w64) == nil:
		for _, x := range w64 {
			v = append(v, float64(x))
		}
	default:
		t.Fatalf("fixture %s: not float32, float64 or int64", key)
	}
	return v, append([]int(nil), h.Descr.Shape...)
}

// node makes a float32 leaf from fixture key.
func (f *normFixtures) node(t *testing.T, g *G.ExprGraph, key string) *G.Node {
	v, shape := f.get(t, key)
	return constNode(g, tensor.Float32, key, v, shape...)
}

// compare checks got against fixture key at the given norm-wise tolerance.
func (f *normFixtures) compare(t *testing.T, key string, got []float64, tol float64) {
	t.Helper()
	want, _ := f.get(t, key)
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", key, len(got), len(want))
	}
	if d := gradcheck.RelNorm(got, want); d > tol {
		t.Errorf("%s: rel %.3g vs PyTorch, want <= %g", key, d, tol)
	} else {
		t.Logf("%s: rel %.3g vs PyTorch", key, d)
	}
}

// fixtureCase builds y = f(inputs) in float32, backpropagates the fixture's dy (cost =
// Σ y⊙dy, or the loss itself when y is a scalar), runs once and compares y and the gradients
// of the named inputs with prefix.y and prefix.d<name>.
func fixtureCase(t *testing.T, fx *normFixtures, prefix string, in []string, grads []string,
	build func(g *G.ExprGraph, in map[string]*G.Node) (*G.Node, error)) {
	t.Helper()
	g := G.NewGraph()
	nodes := map[string]*G.Node{}
	for _, k := range in {
		nodes[k] = fx.node(t, g, prefix+"."+k)
	}
	y, err := build(g, nodes)
	if err != nil {
		t.Fatal(err)
	}
	cost := y
	if !y.Shape().IsScalar() {
		dy := fx.node(t, g, prefix+".dy")
		prod, err := G.HadamardProd(y, dy)
		if err != nil {
			t.Fatal(err)
		}
		if cost, err = Sum(prod); err != nil {
			t.Fatal(err)
		}
	}
	var wrt G.Nodes
	for _, k := range grads {
		wrt = append(wrt, nodes[k])
	}
	gs, err := G.Grad(cost, wrt...)
	if err != nil {
		t.Fatal(err)
	}
	defer runGraph(t, g).Close()
	yKey := prefix + ".y"
	if y.Shape().IsScalar() {
		yKey = prefix + ".loss"
	}
	fx.compare(t, yKey, f64s(t, y), fixFwdTol)
	for i, k := range grads {
		fx.compare(t, prefix+".d"+k, f64s(t, gs[i]), fixGradTol)
	}
}

func TestNormFixturesBatchNormTrain(t *testing.T) {
	fx := openNormFixtures(t)
	for _, prefix := range []string{"bn_train", "bn1d_train"} {
		t.Run(prefix, func(t *testing.T) {
			gv, _ := fx.get(t, prefix+".gamma")
			st := newBNState(len(gv), true)
			clear(st.RunningMean)
			for i := range st.RunningVar {
				st.RunningVar[i] = 1
			}
			fixtureCase(t, fx, prefix, []string{"x0", "gamma", "beta"}, []string{"x0", "gamma", "beta"},
				func(g *G.ExprGraph, in map[string]*G.Node) (*G.Node, error) {
					return BatchNorm2d(in["x0"], in["gamma"], in["beta"], st)
				})
			// Two more training forwards, each in a graph and machine of its own: the state
			// carries over.
			for _, k := range []string{"x1", "x2"} {
				g := G.NewGraph()
				x := fx.node(t, g, prefix+"."+k)
				if _, err := BatchNorm2d(x, nil, nil, st); err != nil {
					t.Fatal(err)
				}
				runGraph(t, g).Close()
			}
			rm, rv := make([]float64, len(gv)), make([]float64, len(gv))
			for i := range rm {
				rm[i], rv[i] = float64(st.RunningMean[i]), float64(st.RunningVar[i])
			}
			fx.compare(t, prefix+".running_mean", rm, fixFwdTol)
			fx.compare(t, prefix+".running_var", rv, fixFwdTol)
			fx.compare(t, prefix+".num_batches_tracked", []float64{float64(st.NumBatchesTracked[0])}, 0)
		})
	}
}

func TestNormFixturesBatchNormEval(t *testing.T) {
	fx := openNormFixtures(t)
	rm, _ := fx.get(t, "bn_eval.running_mean")
	rv, _ := fx.get(t, "bn_eval.running_var")
	st := newBNState(len(rm), false)
	for i := range rm {
		st.RunningMean[i], st.RunningVar[i] = float32(rm[i]), float32(rv[i])
	}
	fixtureCase(t, fx, "bn_eval", []string{"x", "gamma", "beta"}, []string{"x", "gamma", "beta"},
		func(g *G.ExprGraph, in map[string]*G.Node) (*G.Node, error) {
			return BatchNorm2d(in["x"], in["gamma"], in["beta"], st)
		})
	if st.NumBatchesTracked[0] != 0 {
		t.Errorf("eval forward counted a batch")
	}
}

func TestNormFixturesLayerNorm(t *testing.T) {
	fx := openNormFixtures(t)
	for prefix, nd := range map[string]int{"ln1": 1, "ln2": 2} {
		t.Run(prefix, func(t *testing.T) {
			fixtureCase(t, fx, prefix, []string{"x", "gamma", "beta"}, []string{"x", "gamma", "beta"},
				func(g *G.ExprGraph, in map[string]*G.Node) (*G.Node, error) {
					return LayerNorm(in["x"], in["gamma"], in["beta"], nd, 1e-5)
				})
		})
	}
}

func TestNormFixturesActSoftmax(t *testing.T) {
	fx := openNormFixtures(t)
	cases := map[string]func(*G.Node) (*G.Node, error){
		"gelu":       GELU,
		"softmax":    func(x *G.Node) (*G.Node, error) { return Softmax(x, 1) },
		"logsoftmax": func(x *G.Node) (*G.Node, error) { return LogSoftmax(x, 1) },
		"sum12":      func(x *G.Node) (*G.Node, error) { return Sum(x, 1, 2) },
		"mean2":      func(x *G.Node) (*G.Node, error) { return Mean(x, 2) },
	}
	for prefix, f := range cases {
		t.Run(prefix, func(t *testing.T) {
			fixtureCase(t, fx, prefix, []string{"x"}, []string{"x"},
				func(g *G.ExprGraph, in map[string]*G.Node) (*G.Node, error) { return f(in["x"]) })
		})
	}
}

func TestNormFixturesCrossEntropy(t *testing.T) {
	fx := openNormFixtures(t)
	for prefix, s := range map[string]float64{"ce0": 0, "ce01": 0.1} {
		t.Run(prefix, func(t *testing.T) {
			fixtureCase(t, fx, prefix, []string{"logits", "labels"}, []string{"logits"},
				func(g *G.ExprGraph, in map[string]*G.Node) (*G.Node, error) {
					return CrossEntropy(in["logits"], in["labels"], s)
				})
		})
	}
}
