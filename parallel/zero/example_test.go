package zero_test

import (
	"context"
	"fmt"
	"github.com/gorgonia-parallel/gp/train"
	"math"
	"sync"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	G "gorgonia.org/gorgonia"
)

// Two in-process ranks train a small MLP with ZeRO-3: each holds half of the parameters,
// gradients and AdamW state, and gathers a layer's parameters only while a step runs.
func Example() {
	groups := comm.NewLocalGroups(2)
	var wg sync.WaitGroup
	out := make([]string, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer groups[r].Close(context.Background())
			out[r] = trainRank(groups[r])
		}()
	}
	wg.Wait()
	fmt.Print(out[0], out[1])
	// Output:
	// rank 0: units [fc1 fc2], 4 steps, model state 16Ψ/N: true, between steps nothing gathered: true
	// rank 1: units [fc1 fc2], 4 steps, model state 16Ψ/N: true, between steps nothing gathered: true
}

func trainRank(g comm.Group) string {
	ctx := context.Background()
	model, err := nn.NewModel(&nn.Sequential{Names: []string{"fc1", "relu", "fc2"},
		Layers: []nn.Module{&nn.Linear{In: 8, Out: 16}, &nn.ReLU{}, &nn.Linear{In: 16, Out: 3}}}, nn.WithSeed(1))
	if err != nil {
		return err.Error()
	}
	e, err := zero.New(ctx, model, g, zero.WithOptimizer(zero.AdamW(1e-2)), zero.WithWeightDecay(1e-2))
	if err != nil {
		return err.Error()
	}
	defer e.Close()
	prog, err := e.Compile(func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("x", 4, 8)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("y", 4)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(x)
		if err != nil {
			return nil, err
		}
		return ops.CrossEntropy(logits, y, 0)
	})
	if err != nil {
		return err.Error()
	}
	x := make([]float32, 32)
	for i := range x {
		x[i] = float32((i*7+g.Rank())%5) - 2
	}
	prog.SetInput("x", x)
	prog.SetInput("y", []float32{0, 1, 2, 1})
	for range 4 {
		e.ZeroGrad()
		if err := train.RunStep(ctx, prog); err != nil {
			return err.Error()
		}
	}
	var units []string
	for _, u := range prog.Units() {
		units = append(units, u.Name)
	}
	mem := e.Memory()
	// Each unit is padded to a multiple of N, so a rank may hold a few elements more than Ψ/N.
	exact := math.Abs(float64(mem.ModelStateBytes())-mem.FormulaBytes()) <= 0.05*mem.FormulaBytes()+float64(mem.PaddingBytes())
	return fmt.Sprintf("rank %d: units %v, 4 steps, model state 16Ψ/N: %v, between steps nothing gathered: %v\n",
		g.Rank(), units, exact, mem.TransientResidentBytes == 0)
}
