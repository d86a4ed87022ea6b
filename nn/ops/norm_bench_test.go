package ops

import (
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// benchGraph compiles y = f(x) with the gradient of Σ y⊙r, for x of the given shape in
// float32, and times one forward+backward run per iteration. b.SetBytes counts the input
// once, so MB/s reads as input megabytes normalised per second.
func benchGraph(b *testing.B, shape []int, f func(x *G.Node) (*G.Node, G.Nodes, error)) {
	rng := rand.New(rand.NewSource(1))
	g := G.NewGraph()
	x := gradcheck.Input(g, tensor.Float32, rng, "x", shape...)
	y, wrt, err := f(x)
	if err != nil {
		b.Fatal(err)
	}
	r := gradcheck.Input(g, tensor.Float32, rng, "r", shape...)
	prod, err := G.HadamardProd(y, r)
	if err != nil {
		b.Fatal(err)
	}
	cost, err := Sum(prod)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := G.Grad(cost, append(G.Nodes{x}, wrt...)...); err != nil {
		b.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	b.SetBytes(int64(tensor.Shape(shape).TotalSize() * 4))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := m.RunAll(); err != nil {
			b.Fatal(err)
		}
		m.Reset()
	}
}

// The tape above includes gorgonia's own HadamardProd, Sum and their gradients, which
// allocate; BenchmarkNormOpsOnly times the ops alone, through their Do methods.

// BenchmarkNormBatchFwdBwd: BatchNorm2d training forward+backward on 32x64x32x32 (with
// gorgonia's projection ops around it).
func BenchmarkNormBatchFwdBwd(b *testing.B) {
	benchGraph(b, []int{32, 64, 32, 32}, func(x *G.Node) (*G.Node, G.Nodes, error) {
		rng := rand.New(rand.NewSource(2))
		gamma := gradcheck.Input(x.Graph(), tensor.Float32, rng, "gamma", 64)
		beta := gradcheck.Input(x.Graph(), tensor.Float32, rng, "beta", 64)
		y, err := BatchNorm2d(x, gamma, beta, newBNState(64, true))
		return y, G.Nodes{gamma, beta}, err
	})
}

// BenchmarkNormOpsOnly times forward+backward of each op on its own, by calling the ops'
// Do methods directly (what the tape does, minus gorgonia's bookkeeping), float32.
func BenchmarkNormOpsOnly(b *testing.B) {
	shape := []int{32, 64, 32, 32}
	rng := rand.New(rand.NewSource(1))
	x := gradcheck.Rand(rng, tensor.Float32, shape...)
	dy := gradcheck.Rand(rng, tensor.Float32, shape...)
	gamma := gradcheck.Rand(rng, tensor.Float32, 64)
	beta := gradcheck.Rand(rng, tensor.Float32, 64)
	cases := []struct {
		name string
		mk   func() (fwd G.Op, in []G.Value, bwd G.Op, bin func(y G.Value) []G.Value)
	}{
		{"BatchNorm2d", func() (G.Op, []G.Value, G.Op, func(G.Value) []G.Value) {
			f := &bnOp{nop: newNop("bn"), st: newBNState(64, true), shape: tensor.Shape(shape), c: 64, affine: true}
			return f, []G.Value{x, gamma, beta}, &bnGradOp{nop: newNop("bng"), fwd: f}, func(G.Value) []G.Value { return []G.Value{x, dy} }
		}},
		{"ReLU", func() (G.Op, []G.Value, G.Op, func(G.Value) []G.Value) {
			return &unaryOp{nop: newNop("relu"), kind: actReLU, dims: 4}, []G.Value{x},
				&unaryGradOp{nop: newNop("relug"), kind: actReLU, dims: 4}, func(G.Value) []G.Value { return []G.Value{x, dy} }
		}},
		{"Add", func() (G.Op, []G.Value, G.Op, func(G.Value) []G.Value) {
			s := tensor.Shape(shape)
			return &addOp{nop: newNop("add"), a: s, b: s, out: s}, []G.Value{x, dy}, nil, nil
		}},
		{"GAP-Mean(2,3)", func() (G.Op, []G.Value, G.Op, func(G.Value) []G.Value) {
			red := []bool{false, false, true, true}
			out := tensor.Shape{32, 64}
			g := gradcheck.Rand(rng, tensor.Float32, 32, 64)
			return &reduceOp{nop: newNop("mean"), mean: true, in: tensor.Shape(shape), out: out, red: red}, []G.Value{x},
				&expandOp{nop: newNop("meang"), mean: true, in: tensor.Shape(shape), out: out, red: red}, func(G.Value) []G.Value { return []G.Value{g} }
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			fwd, in, bwd, bin := c.mk()
			b.SetBytes(int64(x.Shape().TotalSize() * 4))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				y, err := fwd.Do(in...)
				if err != nil {
					b.Fatal(err)
				}
				if bwd != nil {
					if _, err := bwd.Do(bin(y)...); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
