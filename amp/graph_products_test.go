package amp_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Each form of product Compile autocasts, in a graph loss = Σ(x·w)²: cast automatically it
// is the graph marked by hand with b.Autocast and b.AutocastOutput, bit for bit (the same
// ops on the same rounded values), with three casts (x, w and the product), a loss that is
// not float32's, and a gradient that reaches w through the casts.
func TestAutocastEachProduct(t *testing.T) {
	for _, c := range []struct {
		name string
		x, w []int
		op   func(x, w *G.Node) (*G.Node, error)
	}{
		{"G.Mul matrix", []int{4, 6}, []int{6, 5}, G.Mul},
		{"G.Mul matrix vector", []int{4, 6}, []int{6}, G.Mul},
		{"G.BatchedMatMul", []int{2, 3, 4}, []int{2, 4, 5}, func(x, w *G.Node) (*G.Node, error) { return G.BatchedMatMul(x, w) }},
		{"G.Tensordot", []int{4, 6}, []int{6, 5}, func(x, w *G.Node) (*G.Node, error) { return G.Tensordot([]int{1}, []int{0}, x, w) }},
		{"ops.Linear", []int{4, 6}, []int{5, 6}, func(x, w *G.Node) (*G.Node, error) { return ops.Linear(x, w, nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(11))
			// 12 significant bits: bf16 rounds most of them.
			wv := netValue(rng, 4095, 4096, c.w...)
			xv := netValue(rng, 4095, 4096, c.x...).Data().([]float32)
			build := func(hand bool) nn.BuildFunc {
				return func(b *nn.Builder) (*G.Node, error) {
					x, err := b.Input("x", c.x...)
					if err != nil {
						return nil, err
					}
					w, err := b.Learnable(G.NewTensor(b.Graph, tensor.Float32, len(c.w), G.WithShape(c.w...), G.WithName("w"), G.WithValue(wv.Clone())))
					if err != nil {
						return nil, err
					}
					in := []*G.Node{x, w}
					if hand {
						if in, err = b.Autocast("op", x, w); err != nil {
							return nil, err
						}
					}
					y, err := c.op(in[0], in[1])
					if err != nil {
						return nil, err
					}
					if hand {
						if y, err = b.AutocastOutput("op", y); err != nil {
							return nil, err
						}
					}
					return G.Sum(G.Must(G.Square(y)))
				}
			}
			m, err := nn.NewGraphModel(build(false))
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				loss  float32
				grad  []float32
				casts int
			}
			run := func(build nn.BuildFunc, opts ...nn.BuildOption) result {
				p, err := nn.Compile(m, build, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				if err := p.SetInput("x", xv); err != nil {
					t.Fatal(err)
				}
				m.Params.ZeroGrad()
				if err := p.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				var r result
				r.loss, _ = p.LossValue()
				r.grad = append([]float32(nil), m.Params.Grad...)
				r.casts = castsIn(p, p.Loss)
				return r
			}
			fp32 := run(build(false))
			auto := run(build(false), nn.WithAutocast(amp.Autocast(amp.BF16)))
			hand := run(build(true), nn.WithAutocast(amp.Autocast(amp.BF16)))
			t.Logf("loss: float32 %v, bf16 %v, by hand %v", fp32.loss, auto.loss, hand.loss)
			if auto.loss != hand.loss || !equal32(auto.grad, hand.grad) {
				t.Errorf("autocast loss %v, by hand %v (or their gradients differ): want equal bit for bit", auto.loss, hand.loss)
			}
			if auto.casts != 3 || hand.casts != 3 {
				t.Errorf("casts in the forward: %d automatic, %d by hand; want 3", auto.casts, hand.casts)
			}
			if auto.loss == fp32.loss || equal32(auto.grad, fp32.grad) || maxAbs(auto.grad) == 0 {
				t.Errorf("bf16 loss %v and gradient equal float32's (%v) or vanish", auto.loss, fp32.loss)
			}
		})
	}
}
