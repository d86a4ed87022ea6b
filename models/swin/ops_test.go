package swin

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The ops of this package pass the project's gradient checks (float64 central differences,
// max relative error 1e-6) and agree between float32 and float64 (norm-wise 1e-5).
func TestOpsGradcheck(t *testing.T) {
	// A 2x2 window (N=4), 2 heads of 3 channels, 2 images of 2 windows, shifted-window mask.
	mask := make([]float32, 2*16)
	for i := range mask {
		if i%3 == 0 {
			mask[i] = -100
		}
	}
	rel := relativePositionIndex(2)
	cases := []struct {
		name  string
		build gradcheck.BuildFunc
	}{
		{"gatherRows", func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
			x := gradcheck.Input(g, dt, rng, "x", 2, 3, 3, 2)
			idx := []int32{4, -1, 0, 8, 17, 3, -1, 5}
			y, err := gatherRows(x, idx, 2, tensor.Shape{2, 4, 2})
			return G.Nodes{x}, y, err
		}},
		{"gatherRowsRepeated", func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
			// Row 4 named twice: the gradient adds (the scatter that copies needs distinct rows).
			x := gradcheck.Input(g, dt, rng, "x", 2, 3, 3, 2)
			idx := []int32{4, -1, 4, 8, 17, 3, -1, 5}
			y, err := gatherRows(x, idx, 2, tensor.Shape{2, 4, 2})
			return G.Nodes{x}, y, err
		}},
		{"windowAttention", func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
			qkv := gradcheck.Input(g, dt, rng, "qkv", 4, 4, 18)
			tab := gradcheck.Input(g, dt, rng, "table", 9, 2)
			y, err := windowAttention(qkv, tab, windowAttn{heads: 2, n: 4, c: 6, relIdx: rel, nW: 2, mask: mask})
			return G.Nodes{qkv, tab}, y, err
		}},
		{"windowAttentionUnmasked", func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
			qkv := gradcheck.Input(g, dt, rng, "qkv", 3, 4, 12)
			tab := gradcheck.Input(g, dt, rng, "table", 9, 1)
			y, err := windowAttention(qkv, tab, windowAttn{heads: 1, n: 4, c: 4, relIdx: rel})
			return G.Nodes{qkv, tab}, y, err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := gradcheck.Check(c.build, gradcheck.Options{Samples: 200})
			if err != nil {
				t.Fatal(err)
			}
			if res.MaxRel > 1e-6 {
				t.Fatalf("gradient check: %v", res)
			}
			prec, err := gradcheck.Precision(c.build, 3)
			if err != nil {
				t.Fatal(err)
			}
			if prec > 1e-5 {
				t.Fatalf("float32 vs float64: rel %g", prec)
			}
		})
	}
}

// The fused op equals the unfused composition written with the project's checked ops
// (softmax over the last axis) on the same inputs.
func TestWindowAttentionMatchesSoftmax(t *testing.T) {
	g := G.NewGraph()
	rng := rand.New(rand.NewSource(5))
	rel := relativePositionIndex(2)
	qkv := gradcheck.Input(g, tensor.Float64, rng, "qkv", 1, 4, 3)
	tab := gradcheck.Input(g, tensor.Float64, rng, "table", 9, 1)
	y, err := windowAttention(qkv, tab, windowAttn{heads: 1, n: 4, c: 1, relIdx: rel})
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	x := qkv.Value().Data().([]float64)
	tb := tab.Value().Data().([]float64)
	got := y.Value().Data().([]float64)
	for i := range 4 {
		var w [4]float64
		var sum float64
		for j := range 4 {
			w[j] = expf(x[i*3]*x[j*3+1] + tb[rel[i*4+j]])
			sum += w[j]
		}
		var want float64
		for j := range 4 {
			want += w[j] / sum * x[j*3+2]
		}
		if d := got[i] - want; d > 1e-12 || d < -1e-12 {
			t.Fatalf("row %d: got %g, want %g", i, got[i], want)
		}
	}
}

func expf(v float64) float64 { return math.Exp(v) }

// TestExpRow: expRow agrees with math.Exp within 3e-10 relative (before rounding to float32)
// over [-699.9, 0], dense near 0 where softmax weights live, gives 0 below and NaN for NaN.
func TestExpRow(t *testing.T) {
	row := make([]float32, 1)
	for i := 0; i <= 699900; i++ {
		v := -float32(i) * 1e-3
		row[0] = v
		want := math.Exp(float64(v))
		if got := expRow(row, 0); math.Abs(got-want) > 3e-10*want {
			t.Fatalf("exp(%v) = %v, want %v", v, got, want)
		}
	}
	row = []float32{-800, float32(math.NaN()), 2, 0.5}
	sum := expRow(row, 2)
	if row[0] != 0 || !math.IsNaN(float64(row[1])) || row[2] != 1 || math.Abs(float64(row[3])-math.Exp(-1.5)) > 1e-7 || !math.IsNaN(sum) {
		t.Errorf("expRow(-800, NaN, 2, 0.5; max 2) = %v, sum %v", row, sum)
	}
}

// TestUnhitRows: the rows no index names, in order, or nil when one is named twice.
func TestUnhitRows(t *testing.T) {
	for _, c := range []struct {
		idx  []int32
		rows int
		want []int32
	}{
		{[]int32{2, -1, 0}, 4, []int32{1, 3}},
		{[]int32{1, 0}, 2, []int32{}},
		{[]int32{1, -1, 1}, 3, nil},
	} {
		got := unhitRows(c.idx, c.rows)
		if (got == nil) != (c.want == nil) || len(got) != len(c.want) {
			t.Fatalf("unhitRows(%v, %d) = %v, want %v", c.idx, c.rows, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("unhitRows(%v, %d) = %v, want %v", c.idx, c.rows, got, c.want)
			}
		}
	}
}
