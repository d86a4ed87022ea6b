package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

type dropFunc func(*G.Node, float64, *RNG, bool) (*G.Node, error)

var dropOps = []struct {
	name string
	f    dropFunc
}{{"Dropout", Dropout}, {"DropPath", DropPath}}

// TestDropGradcheck: with the RNG frozen every run draws the same mask, so the op is a
// fixed linear map that the finite differences can check.
func TestDropGradcheck(t *testing.T) {
	for _, op := range dropOps {
		for _, shape := range [][]int{{6, 5}, {1, 3, 4}, {7, 2, 3, 3}} {
			t.Run(fmt.Sprintf("%s/%v", op.name, shape), func(t *testing.T) {
				checkOp(t, func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
					x := gradcheck.Input(g, dt, rng, "x", shape...)
					r := NewRNG(11)
					r.Freeze(true)
					y, err := op.f(x, 0.3, r, true)
					return G.Nodes{x}, y, err
				}, gradBound)
			})
		}
	}
}

// dropRun builds y = f(x) and dx = d sum(y⊙w)/dx for x of ones and w of the given values,
// runs it once and returns y and dx.
func dropRun(t *testing.T, f dropFunc, p float64, r *RNG, shape []int, runs int) (y, dx [][]float64) {
	t.Helper()
	g := G.NewGraph()
	n := tensor.Shape(shape).TotalSize()
	ones := make([]float64, n)
	for i := range ones {
		ones[i] = 1
	}
	x := constNode(g, tensor.Float32, "x", ones, shape...)
	out, err := f(x, p, r, true)
	if err != nil {
		t.Fatal(err)
	}
	cost, err := Sum(out)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := G.Grad(cost, x)
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	for i := 0; i < runs; i++ {
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		y = append(y, f64s(t, out))
		dx = append(dx, f64s(t, grads[0]))
		m.Reset()
	}
	return y, dx
}

// TestDropKeepRateAndScale: the kept fraction is 1-p within 5 standard deviations, kept
// values are exactly x·float32(1/(1-p)) and dropped ones exactly 0, the gradient uses the
// same run's mask and scale, DropPath keeps or drops whole rows, and each run draws a new mask.
func TestDropKeepRateAndScale(t *testing.T) {
	for _, op := range dropOps {
		for _, p := range []float64{0.1, 0.5, 0.8} {
			t.Run(fmt.Sprintf("%s/p=%v", op.name, p), func(t *testing.T) {
				shape := []int{20000, 3}
				if op.name == "Dropout" {
					shape = []int{200, 300}
				}
				ys, dxs := dropRun(t, op.f, p, NewRNG(1), shape, 2)
				scale := float64(float32(1 / (1 - p)))
				units, row := shape[0], shape[1]
				if op.name == "Dropout" {
					units, row = shape[0]*shape[1], 1
				}
				kept := 0
				for u := 0; u < units; u++ {
					k := ys[0][u*row] != 0
					if k {
						kept++
					}
					for j := u * row; j < (u+1)*row; j++ {
						want := 0.0
						if k {
							want = scale
						}
						if ys[0][j] != want || dxs[0][j] != want {
							t.Fatalf("element %d: y %v dx %v, want both %v", j, ys[0][j], dxs[0][j], want)
						}
					}
				}
				sd := math.Sqrt(float64(units) * p * (1 - p))
				if d := float64(kept) - float64(units)*(1-p); math.Abs(d) > 5*sd {
					t.Errorf("kept %d of %d, want %v ± %v", kept, units, float64(units)*(1-p), 5*sd)
				}
				if fmt.Sprint(ys[0]) == fmt.Sprint(ys[1]) {
					t.Error("two runs drew the same mask")
				}
				if fmt.Sprint(dxs[1]) != fmt.Sprint(ys[1]) {
					t.Error("second run's gradient does not use its own mask")
				}
			})
		}
	}
}

// TestDropDeterminism: equal seeds give equal masks; a restored state replays the masks.
func TestDropDeterminism(t *testing.T) {
	shape := []int{50, 40}
	a, _ := dropRun(t, Dropout, 0.5, NewRNG(42), shape, 3)
	b, _ := dropRun(t, Dropout, 0.5, NewRNG(42), shape, 3)
	c, _ := dropRun(t, Dropout, 0.5, NewRNG(43), shape, 1)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("equal seeds, different masks")
	}
	if fmt.Sprint(a[0]) == fmt.Sprint(c[0]) {
		t.Error("different seeds, equal masks")
	}
	r := NewRNG(42)
	dropRun(t, Dropout, 0.5, r, shape, 1)
	seed, counter := r.State()
	if seed != 42 || counter != 1 {
		t.Fatalf("state %d,%d, want 42,1", seed, counter)
	}
	resumed := NewRNG(7)
	resumed.SetState(seed, counter)
	d, _ := dropRun(t, Dropout, 0.5, resumed, shape, 2)
	if fmt.Sprint(d) != fmt.Sprint(a[1:]) {
		t.Error("a restored state does not replay the masks")
	}
}

// TestDropIdentity: eval mode and p=0 return the input node; p=1 zeroes everything.
func TestDropIdentity(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 2, G.WithShape(2, 3), G.WithName("x"))
	for _, op := range dropOps {
		if y, err := op.f(x, 0.5, nil, false); err != nil || y != x {
			t.Errorf("%s eval: %v %v", op.name, y, err)
		}
		if y, err := op.f(x, 0, nil, true); err != nil || y != x {
			t.Errorf("%s p=0: %v %v", op.name, y, err)
		}
		if _, err := op.f(x, 1.5, NewRNG(1), true); err == nil {
			t.Errorf("%s: p=1.5 accepted", op.name)
		}
		ys, dxs := dropRun(t, op.f, 1, NewRNG(1), []int{4, 5}, 1)
		for i := range ys[0] {
			if ys[0][i] != 0 || dxs[0][i] != 0 {
				t.Fatalf("%s p=1: y %v dx %v", op.name, ys[0][i], dxs[0][i])
			}
		}
	}
}
