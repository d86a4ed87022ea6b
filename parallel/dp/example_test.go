package dp_test

import (
	"context"
	"fmt"
	"math/rand"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// mlp is a plain gorgonia perceptron for chunks of n samples: DataParallel builds one graph
// per replica (and chunk size), so the model is a function of the chunk size.
func mlp(b *nn.Builder, n int) (*G.Node, error) {
	x, err := b.Input("x", n, 4)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("y", n, 1)
	if err != nil {
		return nil, err
	}
	w1 := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(4, 16), G.WithName("w1"), G.WithInit(G.GlorotU(1)))
	w2 := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(16, 1), G.WithName("w2"), G.WithInit(G.GlorotU(1)))
	u1, err := b.Learnable(w1)
	if err != nil {
		return nil, err
	}
	u2, err := b.Learnable(w2)
	if err != nil {
		return nil, err
	}
	h := G.Must(G.Rectify(G.Must(G.Mul(x, u1))))
	d := G.Must(G.Sub(G.Must(G.Mul(h, u2)), y))
	return G.Mean(G.Must(G.Square(d)))
}

// A plain gorgonia program on two replicas in one process, stepped by gorgonia's Adam: the
// global batch of 32 is scattered 16+16, the replicas' gradients are reduced onto the
// master, and the solver updates the master once.
func Example_gorgoniaSolver() {
	ctx := context.Background()
	m, err := nn.NewGraphModel(func(b *nn.Builder) (*G.Node, error) { return mlp(b, 32) })
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	d, err := dp.New(m, mlp, dp.WithReplicas(2), dp.WithBuildOptions(nn.WithSolver(G.NewAdamSolver(G.WithLearnRate(0.01)))))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer d.Close()
	p, err := d.Program(32)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	rng := rand.New(rand.NewSource(1))
	x, y := make([]float32, 32*4), make([]float32, 32)
	var first, last float32
	for step := range 200 {
		for i := range 32 {
			var s float32
			for j := range 4 {
				x[4*i+j] = float32(rng.NormFloat64())
				s += x[4*i+j]
			}
			y[i] = s
		}
		if err := p.SetInput("x", x); err == nil {
			err = p.SetInput("y", y)
		}
		if err == nil {
			err = p.Run(ctx) // scatter, two replicas, reduce onto the master
		}
		if err == nil {
			err = p.Step(ctx) // the solver's update of the master
		}
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		l, _ := p.LossValue()
		if step == 0 {
			first = l
		}
		last = l
	}
	fmt.Printf("chunks %v, loss fell tenfold: %v\n", p.Result().Chunks, last < first/10)
	// Output:
	// chunks [16 16], loss fell tenfold: true
}
