package ops

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio/npz"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Tolerances of the tests in conv_*, linear_* and pool_* test files.
const (
	// cvGradTol bounds gradcheck.Check's max relative error (float64 central differences).
	cvGradTol = 1e-6
	// cvLinearEps is the finite-difference step for conv and linear: they are linear in
	// each input, so a central difference is exact but for rounding, and a large step keeps
	// the rounding (|cost|*1e-16/eps) far below cvGradTol even for gradients near 1e-4.
	// Pools use gradcheck's default step (1e-6): a larger one could cross a near-tie.
	cvLinearEps = 1e-3
	// cvPrecTol bounds gradcheck.Precision: float32 against float64, norm-wise.
	cvPrecTol = 1e-5
	// cvFwdTol and cvFixGradTol bound the norm-wise relative error against PyTorch
	// (float64 references from float32 inputs) of our float32 forward and gradients.
	cvFwdTol     = 1e-5
	cvFixGradTol = 1e-4
)

// cvCheck runs gradcheck.Check and gradcheck.Precision on build.
func cvCheck(t *testing.T, build gradcheck.BuildFunc, eps float64) {
	t.Helper()
	res, err := gradcheck.Check(build, gradcheck.Options{Samples: 48, Eps: eps})
	if err != nil {
		t.Fatalf("gradcheck: %v", err)
	}
	if res.MaxRel > cvGradTol {
		t.Errorf("gradcheck: %v (bound %g)", res, cvGradTol)
	}
	prec, err := gradcheck.Precision(build, 7)
	if err != nil {
		t.Fatalf("precision: %v", err)
	}
	if prec > cvPrecTol {
		t.Errorf("float32 vs float64: rel %.3g (bound %g)", prec, cvPrecTol)
	}
	t.Logf("%v; float32 vs float64 rel %.3g", res, prec)
}

// cvFixtures reads nn/ops/testdata/conv_fixtures.npz (written by make_conv_fixtures.py).
type cvFixtures struct {
	r *npz.Reader
}

func openCvFixtures(t *testing.T) *cvFixtures {
	t.Helper()
	r, err := npz.Open("testdata/conv_fixtures.npz")
	if err != nil {
		t.Fatalf("cvFixtures: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return &cvFixtures{r: r}
}

// tensor reads case__name as a float32 tensor with its stored shape.
func (f *cvFixtures) tensor(t *testing.T, key string) *tensor.Dense {
	t.Helper()
	h := f.r.Header(key + ".npy")
	if h == nil {
		t.Fatalf("fixture %s missing", key)
	}
	var v []float32
	if err := f.r.Read(key+".npy", &v); err != nil {
		t.Fatalf("fixture %s: %v", key, err)
	}
	shape := append([]int(nil), h.Descr.Shape...)
	if len(shape) == 0 {
		shape = []int{len(v)}
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

func (f *cvFixtures) ints(t *testing.T, key string) []int {
	t.Helper()
	var v []int64
	if err := f.r.Read(key+".npy", &v); err != nil {
		t.Fatalf("fixture %s: %v", key, err)
	}
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// cases lists the fixture cases whose name starts with prefix.
func (f *cvFixtures) cases(prefix string) []string {
	var out []string
	for _, k := range f.r.Keys() {
		if strings.HasPrefix(k, prefix) && strings.HasSuffix(k, "__y.npy") {
			out = append(out, strings.TrimSuffix(k, "__y.npy"))
		}
	}
	return out
}

// cvCompareFixture builds op(inputs) in float32 from the fixture's values, backpropagates
// sum(y ⊙ gy) and compares y and the gradient of every input (names[i] -> "g"+names[i]).
func cvCompareFixture(t *testing.T, f *cvFixtures, c string, names []string,
	op func(in G.Nodes) (*G.Node, error)) {
	t.Helper()
	g := G.NewGraph()
	var in G.Nodes
	for _, n := range names {
		v := f.tensor(t, c+"__"+n)
		in = append(in, G.NewTensor(g, tensor.Float32, v.Dims(), G.WithShape(v.Shape()...), G.WithName(n), G.WithValue(v)))
	}
	y, err := op(in)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	gyv := f.tensor(t, c+"__gy")
	gy := G.NewTensor(g, tensor.Float32, gyv.Dims(), G.WithShape(gyv.Shape()...), G.WithName("gy"), G.WithValue(gyv))
	cost, err := G.Sum(cvMust(G.HadamardProd(y, gy)))
	if err != nil {
		t.Fatal(err)
	}
	grads, err := G.Grad(cost, in...)
	if err != nil {
		t.Fatalf("%s: Grad: %v", c, err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatalf("%s: run: %v", c, err)
	}
	check := func(what string, got G.Value, tol float64) {
		want := f.tensor(t, c+"__"+what)
		if !got.Shape().Eq(want.Shape()) && got.Shape().TotalSize() != want.Shape().TotalSize() {
			t.Errorf("%s %s: shape %v, PyTorch %v", c, what, got.Shape(), want.Shape())
			return
		}
		if r := gradcheck.RelNorm(cvF64s(got), cvF64s(want)); r > tol {
			t.Errorf("%s %s: rel err %.3g > %g", c, what, r, tol)
		}
	}
	check("y", y.Value(), cvFwdTol)
	for i, n := range names {
		check("g"+n, grads[i].Value(), cvFixGradTol)
	}
}

// cvValues returns the values of nodes as float64 slices (a scalar as one element).
func cvValues(nodes G.Nodes) [][]float64 {
	var got [][]float64
	for _, n := range nodes {
		if s, ok := n.Value().Data().(float32); ok {
			got = append(got, []float64{float64(s)})
			continue
		}
		got = append(got, cvF64s(n.Value()))
	}
	return got
}

func cvF64s(v G.Value) []float64 {
	switch d := v.Data().(type) {
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	case []float64:
		return append([]float64(nil), d...)
	}
	panic(fmt.Sprintf("cvF64s: %T", v.Data()))
}

func cvMust(n *G.Node, err error) *G.Node {
	if err != nil {
		panic(err)
	}
	return n
}

// input is gradcheck.Input, shorter.
func cvIn(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand, name string, shape ...int) *G.Node {
	return gradcheck.Input(g, dt, rng, name, shape...)
}

// cvWantErr checks that err is non-nil and mentions every fragment.
func cvWantErr(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not mention %q", err, f)
		}
	}
}
