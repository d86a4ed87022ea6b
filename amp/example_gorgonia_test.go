package amp_test

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A plain gorgonia build function under bf16 autocast, with no marking: Compile rounds the
// inputs and the output of each G.Mul to bf16 (six casts; the ReLU, subtraction and mean
// stay float32, on the values they receive), and the gradients flow through the casts.
func Example_gorgonia() {
	mlp := func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("x", 4, 3)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("y", 4, 1)
		if err != nil {
			return nil, err
		}
		w1, err := b.Learnable(G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(3, 8), G.WithName("w1"),
			G.WithValue(tensor.New(tensor.WithShape(3, 8), tensor.WithBacking(ramp(24, 0.1))))))
		if err != nil {
			return nil, err
		}
		w2, err := b.Learnable(G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(8, 1), G.WithName("w2"),
			G.WithValue(tensor.New(tensor.WithShape(8, 1), tensor.WithBacking(ramp(8, 0.3))))))
		if err != nil {
			return nil, err
		}
		h := G.Must(G.Rectify(G.Must(G.Mul(x, w1))))
		d := G.Must(G.Sub(G.Must(G.Mul(h, w2)), y))
		return G.Mean(G.Must(G.Square(d)))
	}
	model, err := nn.NewGraphModel(mlp)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, opts := range [][]nn.BuildOption{nil, {nn.WithAutocast(amp.Autocast(amp.BF16))}} {
		p, err := nn.Compile(model, mlp, opts...)
		if err != nil {
			fmt.Println(err)
			return
		}
		_ = p.SetInput("x", ramp(12, 0.7))
		_ = p.SetInput("y", ramp(4, 1.3))
		model.Params.ZeroGrad()
		if err := p.Run(context.Background()); err != nil {
			fmt.Println(err)
			return
		}
		loss, _ := p.LossValue()
		fmt.Printf("casts %d, loss %.6f, dloss/dw2[0] %.6f\n", castsIn(p, p.Loss), loss, model.Params.Param("w2").Grad[0])
		p.Close()
	}
	// Output:
	// casts 0, loss 0.277511, dloss/dw2[0] 0.014846
	// casts 6, loss 0.277486, dloss/dw2[0] 0.014893
}

// ramp is n values that step by step·(-1)^i around zero: fixed data without an RNG.
func ramp(n int, step float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = step * float32(i%5-2) / 3
		if i%2 == 1 {
			v[i] = -v[i]
		}
	}
	return v
}
