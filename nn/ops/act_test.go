package ops

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestActGradcheck(t *testing.T) {
	ops := []struct {
		name string
		f    func(*G.Node) (*G.Node, error)
	}{
		{"ReLU", ReLU},
		{"GELU", GELU},
	}
	for _, op := range ops {
		for _, shape := range [][]int{{1, 7}, {3, 5, 2}, {2, 3, 4, 5}} {
			t.Run(fmt.Sprintf("%s/%v", op.name, shape), func(t *testing.T) {
				// ReLU's kink at 0 is never within eps of an N(0,1) sample here.
				checkOp(t, unaryBuild(op.f, shape...), gradBound)
			})
		}
	}
}

func TestActValues(t *testing.T) {
	in := []float64{-3, -1, -0.5, 0, 0.5, 1, 3}
	// GELU values from Debian's PyTorch 1.13.1 (reports 1.13.0a0): torch.nn.functional.gelu(torch.tensor(in, dtype=torch.float64)).
	gelu := []float64{-0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0, 0.34573123063700656, 0.841344746068543, 2.99595030590511}
	relu := []float64{0, 0, 0, 0, 0.5, 1, 3}
	for _, tc := range []struct {
		f    func(*G.Node) (*G.Node, error)
		want []float64
	}{{GELU, gelu}, {ReLU, relu}} {
		g := G.NewGraph()
		x := constNode(g, tensor.Float64, "x", in, len(in))
		y, err := tc.f(x)
		if err != nil {
			t.Fatal(err)
		}
		m := runGraph(t, g)
		for i, v := range f64s(t, y) {
			if math.Abs(v-tc.want[i]) > 1e-12 {
				t.Errorf("f(%v) = %v, want %v", in[i], v, tc.want[i])
			}
		}
		m.Close()
	}
}

// TestActReLUEdges: ReLU of ±0 is +0 with gradient 0; NaN propagates.
func TestActReLUEdges(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		g := G.NewGraph()
		x := constNode(g, dt, "x", []float64{math.Copysign(0, -1), 0, -2, 3, math.NaN()}, 5)
		y, err := ReLU(x)
		if err != nil {
			t.Fatal(err)
		}
		cost, err := Sum(y)
		if err != nil {
			t.Fatal(err)
		}
		gs, err := G.Grad(cost, x)
		if err != nil {
			t.Fatal(err)
		}
		m := runGraph(t, g)
		yv, dv := f64s(t, y), f64s(t, gs[0])
		for i, want := range []float64{0, 0, 0, 3} {
			if yv[i] != want || math.Signbit(yv[i]) {
				t.Errorf("%v: relu[%d] = %v, want %v", dt, i, yv[i], want)
			}
		}
		if !math.IsNaN(yv[4]) {
			t.Errorf("%v: relu(NaN) = %v", dt, yv[4])
		}
		if want := []float64{0, 0, 0, 1}; fmt.Sprint(dv[:4]) != fmt.Sprint(want) {
			t.Errorf("%v: grad %v, want %v", dt, dv[:4], want)
		}
		m.Close()
	}
}
