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

func TestSoftmaxGradcheck(t *testing.T) {
	for _, tc := range []struct {
		shape []int
		axis  int
	}{
		{[]int{2, 3, 4, 5}, 1}, {[]int{2, 3, 4, 5}, 2}, {[]int{2, 3, 4, 5}, -1}, {[]int{2, 3, 4, 5}, 0},
		{[]int{1, 7}, 1}, {[]int{3, 1, 5}, 1},
	} {
		for _, log := range []bool{false, true} {
			t.Run(fmt.Sprintf("log=%v/%v/axis%d", log, tc.shape, tc.axis), func(t *testing.T) {
				f := Softmax
				if log {
					f = LogSoftmax
				}
				checkOp(t, unaryBuild(func(x *G.Node) (*G.Node, error) { return f(x, tc.axis) }, tc.shape...), gradBound)
			})
		}
	}
}

// TestSoftmaxValues: every slice along the axis sums to one, and log-softmax is its log.
func TestSoftmaxValues(t *testing.T) {
	shape := []int{2, 3, 4}
	for axis := 0; axis < 3; axis++ {
		g := G.NewGraph()
		rng := rand.New(rand.NewSource(int64(axis)))
		x := gradcheck.Input(g, tensor.Float64, rng, "x", shape...)
		sm, err := Softmax(x, axis)
		if err != nil {
			t.Fatal(err)
		}
		lsm, err := LogSoftmax(x, axis)
		if err != nil {
			t.Fatal(err)
		}
		tot, err := Sum(sm, axis)
		if err != nil {
			t.Fatal(err)
		}
		m := runGraph(t, g)
		for _, v := range f64s(t, tot) {
			if math.Abs(v-1) > 1e-14 {
				t.Errorf("axis %d: softmax sums to %v", axis, v)
			}
		}
		p, lp := f64s(t, sm), f64s(t, lsm)
		for i := range p {
			if math.Abs(math.Log(p[i])-lp[i]) > 1e-13 {
				t.Errorf("axis %d: log(softmax) %v vs log-softmax %v", axis, math.Log(p[i]), lp[i])
			}
		}
		m.Close()
	}
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 2, G.WithShape(2, 3), G.WithName("x"))
	if _, err := Softmax(x, 2); err == nil || !strings.Contains(err.Error(), "Softmax: axis 2 out of range for shape (2, 3)") {
		t.Errorf("error %v", err)
	}
}
