package dp_test

import (
	"context"
	"fmt"
	"math/rand"

	"github.com/gorgonia-parallel/gp/parallel/dp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Fit y = x·w by least squares with a raw gorgonia graph on two CPU replicas. The graph
// function gets the learnable w and a chunk of x and y; DataParallel scatters each batch of
// 10 samples as 5+5, runs both replicas at once, and sums their gradients onto the master.
func Example() {
	w0 := tensor.New(tensor.WithShape(3, 1), tensor.WithBacking([]float32{0, 0, 0}))
	mse := func(g *G.ExprGraph, learnables, inputs G.Nodes) (loss, output *G.Node, err error) {
		x, y, w := inputs[0], inputs[1], learnables[0]
		if output, err = G.Mul(x, w); err != nil { // [n,3]·[3,1] = [n,1]
			return nil, nil, err
		}
		diff, err := G.Sub(output, y)
		if err != nil {
			return nil, nil, err
		}
		sq, err := G.Square(diff)
		if err != nil {
			return nil, nil, err
		}
		loss, err = G.Mean(sq) // the chunk's mean: DataParallel weights it by chunk size
		return loss, output, err
	}
	d, err := dp.NewGraph(
		[]dp.Learnable{{Name: "w", Value: w0}},
		[]dp.Input{{Name: "x", Shape: []int{3}}, {Name: "y", Shape: []int{1}}},
		mse, dp.WithReplicas(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()

	rng := rand.New(rand.NewSource(1))
	truth := []float32{1, -2, 0.5}
	ps := d.Model().Params
	for step := 0; step < 60; step++ {
		x, y := make([]float32, 10*3), make([]float32, 10)
		for i := range y {
			for j := range 3 {
				x[3*i+j] = float32(rng.NormFloat64())
				y[i] += x[3*i+j] * truth[j]
			}
		}
		ps.ZeroGrad()
		res, err := d.Step(context.Background(), dp.Batch{N: 10, Inputs: map[string][]float32{"x": x, "y": y}})
		if err != nil {
			fmt.Println(err)
			return
		}
		for i, g := range ps.Grad { // plain SGD on the master; package optim works as well
			ps.Data[i] -= 0.1 * g
		}
		if step%20 == 0 {
			fmt.Printf("step %2d: loss %.4f on chunks %v, %d outputs gathered\n", step, res.Loss, res.Chunks, len(res.Outputs["output"]))
		}
	}
	w, _, _ := d.Learnable(0)
	fmt.Printf("w = [%.2f %.2f %.2f]\n", w.Data().([]float32)[0], w.Data().([]float32)[1], w.Data().([]float32)[2])
	// Output:
	// step  0: loss 4.2695 on chunks [5 5], 10 outputs gathered
	// step 20: loss 0.0006 on chunks [5 5], 10 outputs gathered
	// step 40: loss 0.0000 on chunks [5 5], 10 outputs gathered
	// w = [1.00 -2.00 0.50]
}
