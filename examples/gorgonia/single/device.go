package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
)

// runOn is run on the GPU that device names (cuda: device 0; cuda:N): the same learnables
// and forward, handed to nn's builder as the ddp example does (b.Learnable binds w1 and w2
// to the model's parameter memory), executed by cuda/tape; gorgonia's Adam steps the host
// weights, which the next step copies in. Without a GPU (or a build without cgo) it fails
// at once, naming the library.
func runOn(device string, steps int, w0 []float32) ([]float32, error) {
	ordinal := 0
	if n, ok := strings.CutPrefix(device, "cuda:"); ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("-device %s: want cuda:N with N a device ordinal", device)
		}
		ordinal = v
	} else if device != "cuda" {
		return nil, fmt.Errorf("unknown -device %q (cpu, cuda or cuda:N)", device)
	}
	dev, err := cuda.Open(ordinal)
	if err != nil {
		return nil, fmt.Errorf("-device %s: %w", device, err)
	}
	defer dev.Close()
	build := func(b *nn.Builder) (*G.Node, error) { return mlp(b, batch) }
	m, err := nn.NewGraphModel(build)
	if err != nil {
		return nil, err
	}
	if w0 != nil {
		for i, name := range []string{"w1", "w2"} {
			p := m.Params.Param(name)
			if p == nil || len(p.Data) != []int{in * hidden, hidden * out}[i] {
				return nil, fmt.Errorf("initial weights: the model's %s is %v", name, p)
			}
			copy(p.Data, w0[i*in*hidden:])
		}
	}
	p, err := tape.Compile(dev, m, build, nn.WithSolver(G.NewAdamSolver(G.WithLearnRate(0.01))))
	if err != nil {
		return nil, err
	}
	defer p.Close()

	ctx := context.Background()
	x, y := make([]float32, batch*in), make([]float32, batch*out)
	var losses []float32
	for step := range steps {
		samples(x, y, step*batch, batch)
		if err := p.SetInput("x", x); err != nil {
			return nil, err
		}
		if err := p.SetInput("y", y); err != nil {
			return nil, err
		}
		if err := train.RunStep(ctx, p); err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		loss, err := p.LossValue()
		if err != nil {
			return nil, err
		}
		losses = append(losses, loss)
		report(step, steps, loss)
	}
	fmt.Printf("final loss %.4f, sum of weights %.6f\n", losses[len(losses)-1], checksum(m.Params.Data))
	return losses, nil
}

// mlp is the perceptron for nn's builder, for batches of n.
func mlp(b *nn.Builder, n int) (*G.Node, error) {
	x, err := b.Input("x", n, in)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("y", n, out)
	if err != nil {
		return nil, err
	}
	w1, w2 := learnables(b.Graph)
	u1, err := b.Learnable(w1)
	if err != nil {
		return nil, err
	}
	u2, err := b.Learnable(w2)
	if err != nil {
		return nil, err
	}
	return forward(x, y, u1, u2)
}
