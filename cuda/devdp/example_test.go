//go:build cgo

package devdp_test

import (
	"context"
	"fmt"
	"log"
	"math/rand"

	"github.com/gorgonia-parallel/gp/cuda/devdp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// perceptron is a plain gorgonia model for chunks of n samples: DataParallel builds one
// graph per device and chunk size, so the model is a function of the chunk size.
func perceptron(b *nn.Builder, n int) (*G.Node, error) {
	x, err := b.Input("x", n, 4)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("y", n, 1)
	if err != nil {
		return nil, err
	}
	w1, err := b.Learnable(G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(4, 16), G.WithName("w1"), G.WithInit(G.GlorotU(1))))
	if err != nil {
		return nil, err
	}
	w2, err := b.Learnable(G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(16, 1), G.WithName("w2"), G.WithInit(G.GlorotU(1))))
	if err != nil {
		return nil, err
	}
	d := G.Must(G.Sub(G.Must(G.Mul(G.Must(G.Rectify(G.Must(G.Mul(x, w1)))), w2)), y))
	return G.Mean(G.Must(G.Square(d)))
}

// DataParallel over GPUs 0 and 1 of this process, as torch.nn.DataParallel(model,
// device_ids=[0, 1]): each step scatters the global batch of 32 in two chunks of 16, runs
// both replicas, sums their gradients onto GPU 0 and steps the optimizer once, there.
//
// go test runs it on the fake driver with two devices and the kernel emulator that this
// package's TestMain installs (cudatest.MainEmulated: device memory in host memory, every
// kernel and GEMM computed on the CPU), the same calls a program makes on two GPUs. The file
// builds only with cgo, the one build where the CUDA libraries can be loaded at all; an
// Example cannot skip, so one that ran without the fakes would fail rather than pass without
// devices.
func Example() {
	ctx := context.Background()
	devs, err := devdp.Open(dp.GPUs(0, 1)) // the first is the master
	if err != nil {
		log.Fatal(err) // one GPU only: "devdp: replica 1 on cuda:1: ..."
	}
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	m, err := nn.NewGraphModel(func(b *nn.Builder) (*G.Node, error) { return perceptron(b, 32) })
	if err != nil {
		log.Fatal(err)
	}
	segs, err := optim.Segments(m.Params, 0) // no weight decay
	if err != nil {
		log.Fatal(err)
	}
	sgd, err := optim.NewSGD(segs, 0.05, optim.WithMomentum(0.9))
	if err != nil {
		log.Fatal(err)
	}
	// dp's DataParallel with its replicas on the devices: the optimizer goes in as for every
	// backend, and steps on the master's device.
	be := devdp.NewBackend(devs...)
	d, err := dp.New(m, perceptron, dp.WithBackend(be), dp.WithBuildOptions(nn.WithOptimizer(sgd)))
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	const batch = 32
	p, err := d.Program(batch)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	rng := rand.New(rand.NewSource(1))
	x, y := make([]float32, batch*4), make([]float32, batch)
	var first, last float32
	for step := range 100 {
		for i := range batch { // y is the sum of x's four values
			y[i] = 0
			for j := range 4 {
				x[4*i+j] = float32(rng.NormFloat64())
				y[i] += x[4*i+j]
			}
		}
		if err := p.SetInput("x", x); err != nil {
			log.Fatal(err)
		}
		if err := p.SetInput("y", y); err != nil {
			log.Fatal(err)
		}
		if err := train.RunStep(ctx, p); err != nil { // Run, then Step (which zeroes the gradients)
			log.Fatal(err)
		}
		if last, err = p.LossValue(); err != nil { // the global batch's mean loss
			log.Fatal(err)
		}
		if step == 0 {
			first = last
		}
	}
	// The parameters live on GPU 0; copy them to m for a checkpoint or an eval on the CPU.
	if err := be.Master().ToHost(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("loss fell tenfold in 100 steps: %v\n", last < first/10)
	// Output: loss fell tenfold in 100 steps: true
}
