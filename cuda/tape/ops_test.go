package tape_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// opTol bounds each op's loss and gradient against the CPU: the device's libm (expf, logf,
// powf, tanhf in float32) and gorgonia's (float64 then rounded) differ by an ulp or two, and
// sums run in other orders; 1e-5 of the values' scale is ~100 ulps, a wrong formula or a
// wrong layout is off by far more.
const opTol = 1e-5

type opCase struct {
	name     string
	x, w     []int // shapes of the input and the learnable
	positive bool  // values in [0.5, 1.5] (logs, roots, powers), else [-1.5, 1.5]
	f        func(x, w *G.Node) (*G.Node, error)
}

func must(n *G.Node, err error) *G.Node { return G.Must(n, err) }

// Every lowering of the op table, forward and the backward G.Grad builds for it, against
// nn.Compile's CPU run of the same graph: loss = Σ f(x, w), its value and ∂loss/∂w.
var opCases = []opCase{
	{"abs", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Abs(must(G.HadamardProd(x, w))) }},
	{"sin", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Sin(must(G.HadamardProd(x, w))) }},
	{"cos", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Cos(must(G.HadamardProd(x, w))) }},
	{"exp", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Exp(must(G.HadamardProd(x, w))) }},
	{"ln", []int{2, 3}, []int{2, 3}, true, func(x, w *G.Node) (*G.Node, error) { return G.Log(must(G.HadamardProd(x, w))) }},
	{"log2", []int{2, 3}, []int{2, 3}, true, func(x, w *G.Node) (*G.Node, error) { return G.Log2(must(G.HadamardProd(x, w))) }},
	{"neg", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Neg(must(G.HadamardProd(x, w))) }},
	{"square", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Square(must(G.HadamardProd(x, w))) }},
	{"sqrt", []int{2, 3}, []int{2, 3}, true, func(x, w *G.Node) (*G.Node, error) { return G.Sqrt(must(G.HadamardProd(x, w))) }},
	{"inv", []int{2, 3}, []int{2, 3}, true, func(x, w *G.Node) (*G.Node, error) { return G.Inverse(must(G.HadamardProd(x, w))) }},
	{"invSqrt", []int{2, 3}, []int{2, 3}, true, func(x, w *G.Node) (*G.Node, error) { return G.InverseSqrt(must(G.HadamardProd(x, w))) }},
	{"cube", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Cube(must(G.HadamardProd(x, w))) }},
	{"tanh", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Tanh(must(G.HadamardProd(x, w))) }},
	{"sigmoid", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Sigmoid(must(G.HadamardProd(x, w))) }},
	{"log1p", []int{2, 3}, []int{2, 3}, true, func(x, w *G.Node) (*G.Node, error) { return G.Log1p(must(G.HadamardProd(x, w))) }},
	{"expm1", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Expm1(must(G.HadamardProd(x, w))) }},
	{"softplus", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Softplus(must(G.HadamardProd(x, w))) }},
	{"rectify (>= and ⊙)", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Rectify(must(G.HadamardProd(x, w))) }},
	{"add", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Square(must(G.Add(x, w))) }},
	{"sub", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Square(must(G.Sub(x, w))) }},
	{"div", []int{2, 3}, []int{2, 3}, true, func(x, w *G.Node) (*G.Node, error) { return G.HadamardDiv(x, w) }},
	{"pow", []int{2, 3}, []int{2, 3}, true, func(x, w *G.Node) (*G.Node, error) { return G.Pow(x, w) }},
	{"tensor ⊙ scalar", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.Mul(must(G.Add(x, w)), G.NewConstant(float32(1.5)))))
	}},
	{"scalar - tensor", []int{2, 3}, []int{2, 3}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.Sub(G.NewConstant(float32(0.25)), must(G.HadamardProd(x, w)))))
	}},
	{"broadcast add (repeat)", []int{4, 3}, []int{1, 3}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.BroadcastAdd(x, w, nil, []byte{0})))
	}},
	{"broadcast mul (repeat)", []int{3, 4}, []int{3, 1}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.BroadcastHadamardProd(x, w, nil, []byte{1})))
	}},
	{"matmul (A×B, Aᵀ×B, A×Bᵀ)", []int{2, 3}, []int{3, 4}, false, func(x, w *G.Node) (*G.Node, error) { return G.Square(must(G.Mul(x, w))) }},
	{"transpose", []int{2, 3}, []int{4, 3}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.Mul(x, must(G.Transpose(w)))))
	}},
	{"matrix × vector", []int{2, 3}, []int{3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Square(must(G.Mul(x, w))) }},
	// gorgonia v0.9.18 builds a wrong-shaped gradient for the outer product of vectors of
	// different lengths (nn.Compile fails on the CPU), so both have 3 elements.
	{"outer product", []int{3}, []int{3}, false, func(x, w *G.Node) (*G.Node, error) { return G.Square(must(G.OuterProd(x, w))) }},
	{"batched matmul", []int{2, 2, 3}, []int{2, 3, 2}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.BatchedMatMul(x, w)))
	}},
	{"sum along 1", []int{2, 3, 4}, []int{2, 3, 4}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.Sum(must(G.HadamardProd(x, w)), 1)))
	}},
	{"mean along 0", []int{4, 3}, []int{4, 3}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.Mean(must(G.HadamardProd(x, w)), 0)))
	}},
	{"reshape", []int{2, 6}, []int{2, 6}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.Reshape(must(G.HadamardProd(x, w)), tensor.Shape{3, 4})))
	}},
	{"softmax", []int{3, 5}, []int{3, 5}, false, func(x, w *G.Node) (*G.Node, error) {
		return G.Square(must(G.SoftMax(must(G.HadamardProd(x, w)))))
	}},
}

func TestOpsMatchCPU(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	for i, c := range opCases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(i), 1))
			draw := func(n int) []float32 {
				v := make([]float32, n)
				for j := range v {
					if c.positive {
						v[j] = float32(0.5 + r.Float64())
					} else {
						v[j] = float32(3*r.Float64() - 1.5)
					}
				}
				return v
			}
			xv, wv := draw(prod(c.x)), draw(prod(c.w))
			build := func(b *nn.Builder) (*G.Node, error) {
				x, err := b.Input("x", c.x...)
				if err != nil {
					return nil, err
				}
				w := G.NewTensor(b.Graph, tensor.Float32, len(c.w), G.WithShape(c.w...), G.WithName("w"),
					G.WithValue(tensor.New(tensor.WithShape(c.w...), tensor.WithBacking(append([]float32(nil), wv...)))))
				wu, err := b.Learnable(w)
				if err != nil {
					return nil, err
				}
				y, err := c.f(x, wu)
				if err != nil {
					return nil, err
				}
				return G.Sum(y)
			}
			mc, err := nn.NewGraphModel(build)
			if err != nil {
				t.Fatal(err)
			}
			md, err := nn.NewGraphModel(build)
			if err != nil {
				t.Fatal(err)
			}
			cpu, err := nn.Compile(mc, build)
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			dev, err := tape.Compile(d, md, build)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			if err := cpu.SetInput("x", xv); err != nil {
				t.Fatal(err)
			}
			if err := dev.SetInput("x", xv); err != nil {
				t.Fatal(err)
			}
			if err := cpu.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if err := dev.Run(ctx); err != nil {
				t.Fatal(err)
			}
			lc, _ := cpu.LossValue()
			ld, _ := dev.LossValue()
			rl, rg := maxRel([]float32{ld}, []float32{lc}), maxRel(md.Params.Grad, mc.Params.Grad)
			t.Logf("loss %.3g, gradient %.3g relative", rl, rg)
			if rl > opTol || rg > opTol {
				t.Fatalf("loss %v (cpu %v), gradient %v (cpu %v): differ by %.3g and %.3g (tolerance %g)", ld, lc, md.Params.Grad, mc.Params.Grad, rl, rg, opTol)
			}
		})
	}
}

func prod(s []int) int {
	p := 1
	for _, v := range s {
		p *= v
	}
	return p
}
