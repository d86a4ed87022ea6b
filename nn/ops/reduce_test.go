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

func TestReduceGradcheck(t *testing.T) {
	tests := []struct {
		shape []int
		axes  []int
	}{
		{[]int{2, 3, 4, 5}, []int{2}},    // the middle axis gorgonia gets wrong
		{[]int{2, 3, 4, 5}, []int{1, 2}}, // two middle axes
		{[]int{2, 3, 4, 5}, []int{2, 3}}, // global average pool
		{[]int{3, 1, 5, 7}, []int{0, 2}}, // non-adjacent, a unit dim between
		{[]int{1, 5, 3}, []int{-1}},      // batch 1, negative axis
		{[]int{4, 7}, []int{0}},          // leading axis
		{[]int{3, 5, 2}, nil},            // everything to a scalar
		{[]int{2, 3, 4, 5}, []int{0, 1, 2, 3}},
	}
	for _, tc := range tests {
		for _, mean := range []bool{false, true} {
			name := fmt.Sprintf("mean=%v/%v/axes%v", mean, tc.shape, tc.axes)
			t.Run(name, func(t *testing.T) {
				f := Sum
				if mean {
					f = Mean
				}
				checkOp(t, unaryBuild(func(x *G.Node) (*G.Node, error) { return f(x, tc.axes...) }, tc.shape...), gradBound)
			})
		}
	}
}

// TestReduceValues compares against a direct loop over every index, for each subset of axes
// of a 4-D tensor.
func TestReduceValues(t *testing.T) {
	shape := []int{2, 3, 4, 5}
	rng := rand.New(rand.NewSource(3))
	for mask := 0; mask < 16; mask++ {
		var axes []int
		for a := 0; a < 4; a++ {
			if mask&(1<<a) != 0 {
				axes = append(axes, a)
			}
		}
		if len(axes) == 0 {
			continue
		}
		g := G.NewGraph()
		x := gradcheck.Input(g, tensor.Float64, rng, "x", shape...)
		y, err := Mean(x, axes...)
		if err != nil {
			t.Fatal(err)
		}
		m := runGraph(t, g)
		got := f64s(t, y)
		want := naiveMean(x.Value().Data().([]float64), shape, mask)
		if d := gradcheck.RelNorm(got, want); d > 1e-14 {
			t.Errorf("axes %v: rel %g", axes, d)
		}
		m.Close()
	}
}

func naiveMean(x []float64, shape []int, mask int) []float64 {
	outShape, count := []int{}, 1
	for a, s := range shape {
		if mask&(1<<a) == 0 {
			outShape = append(outShape, s)
		} else {
			count *= s
		}
	}
	n := 1
	for _, s := range outShape {
		n *= s
	}
	out := make([]float64, n)
	for i, v := range x {
		rem, o := i, 0
		idx := make([]int, 4)
		for a := 3; a >= 0; a-- {
			idx[a] = rem % shape[a]
			rem /= shape[a]
		}
		for a := 0; a < 4; a++ {
			if mask&(1<<a) == 0 {
				o = o*shape[a] + idx[a]
			}
		}
		out[o] += v / float64(count)
	}
	return out
}

func TestAddGradcheck(t *testing.T) {
	tests := []struct{ a, b []int }{
		{[]int{2, 3, 4, 5}, []int{2, 3, 4, 5}}, // residual
		{[]int{3, 2, 5, 5}, []int{1, 2, 5, 5}}, // attention bias
		{[]int{4, 7}, []int{7}},                // bias
		{[]int{1, 3, 1}, []int{2, 1, 5}},       // both broadcast
		{[]int{2, 3, 4}, []int{3, 1}},          // middle
		{[]int{5}, []int{1}},                   // scalar-like
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v+%v", tc.a, tc.b), func(t *testing.T) {
			checkOp(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
				a := gradcheck.Input(g, dt, rng, "a", tc.a...)
				b := gradcheck.Input(g, dt, rng, "b", tc.b...)
				y, err := Add(a, b)
				return G.Nodes{a, b}, y, err
			}, gradBound)
		})
	}
}

func TestAddValues(t *testing.T) {
	g := G.NewGraph()
	a := constNode(g, tensor.Float32, "a", []float64{1, 2, 3, 4, 5, 6}, 2, 3, 1)
	b := constNode(g, tensor.Float32, "b", []float64{10, 20}, 1, 2)
	y, err := Add(a, b)
	if err != nil {
		t.Fatal(err)
	}
	defer runGraph(t, g).Close()
	want := []float64{11, 21, 12, 22, 13, 23, 14, 24, 15, 25, 16, 26}
	if got := f64s(t, y); fmt.Sprint(got) != fmt.Sprint(want) || !y.Shape().Eq(tensor.Shape{2, 3, 2}) {
		t.Fatalf("got %v %v, want %v [2 3 2]", y.Shape(), got, want)
	}
}

func TestReduceAddErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 3, 4), G.WithName("x"))
	y := G.NewTensor(g, tensor.Float32, 2, G.WithShape(5, 4), G.WithName("y"))
	z := G.NewTensor(g, tensor.Float64, 1, G.WithShape(4), G.WithName("z"))
	cases := []struct {
		f    func() (*G.Node, error)
		want string
	}{
		{func() (*G.Node, error) { return Sum(x, 3) }, "Sum: axis 3 out of range for shape (2, 3, 4)"},
		{func() (*G.Node, error) { return Mean(x, 1, -2) }, "Mean: axis -2 given twice"},
		{func() (*G.Node, error) { return Add(x, y) }, "Add: shapes (2, 3, 4) and (5, 4) do not broadcast"},
		{func() (*G.Node, error) { return Add(x, z) }, "Add: dtypes differ"},
	}
	for _, c := range cases {
		_, err := c.f()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", err, c.want)
		}
	}
}

// TestMeanFloat32Accuracy: a float32 mean of 1e6 values accumulates in float64.
func TestMeanFloat32Accuracy(t *testing.T) {
	g := G.NewGraph()
	v := make([]float64, 1<<20)
	for i := range v {
		v[i] = 0.1
	}
	x := constNode(g, tensor.Float32, "x", v, 1<<10, 1<<10)
	y, err := Mean(x)
	if err != nil {
		t.Fatal(err)
	}
	defer runGraph(t, g).Close()
	if got := f64s(t, y)[0]; math.Abs(got-float64(float32(0.1))) > 1e-8 {
		t.Fatalf("mean %v", got)
	}
}
