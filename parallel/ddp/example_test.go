package ddp_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// mlp is a plain gorgonia two-layer perceptron for batches of 16: the learnables are
// created as gorgonia's examples create them and passed through b.Learnable, which is what
// lets DDP reduce their gradients while backward runs.
func mlp(b *nn.Builder) (*G.Node, error) {
	x, err := b.Input("x", 16, 4)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("y", 16, 1)
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

// A plain gorgonia program trained with DDP on two ranks (goroutines here; processes under
// gprun, with comm.InitFromEnv) and gorgonia's own Adam solver: every rank ends with the same
// weights, because Node.Grad() of the learnables is the averaged gradient.
func Example_gorgoniaSolver() {
	const world = 2
	ctx := context.Background()
	groups := comm.NewLocalGroups(world)
	progs := make([]*ddp.Program, world)
	var wg sync.WaitGroup
	var mu sync.Mutex // gorgonia's graph construction is not thread-safe
	errs := make([]error, world)
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				mu.Lock()
				m, err := nn.NewGraphModel(mlp)
				mu.Unlock()
				if err != nil {
					return err
				}
				d, err := ddp.New(ctx, m, groups[r]) // checks the models agree, broadcasts rank 0's
				if err != nil {
					return err
				}
				mu.Lock()
				p, err := d.Compile(mlp, nn.WithSolver(G.NewAdamSolver(G.WithLearnRate(0.01))))
				mu.Unlock()
				if err != nil {
					return err
				}
				progs[r] = p
				rng := rand.New(rand.NewSource(int64(r))) // each rank its own data
				x, y := make([]float32, 16*4), make([]float32, 16)
				for range 200 {
					for i := range 16 {
						var s float32
						for j := range 4 {
							x[4*i+j] = float32(rng.NormFloat64())
							s += x[4*i+j]
						}
						y[i] = s
					}
					if err := p.SetInput("x", x); err != nil {
						return err
					}
					if err := p.SetInput("y", y); err != nil {
						return err
					}
					if err := p.Run(ctx); err != nil { // forward, backward, all-reduce
						return err
					}
					if err := p.Step(ctx); err != nil { // the solver's update
						return err
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
	}
	a := progs[0].Learnables()[0].Value().Data().([]float32)
	b := progs[1].Learnables()[0].Value().Data().([]float32)
	same := true
	for i := range a {
		same = same && a[i] == b[i]
	}
	loss, _ := progs[0].LossValue()
	fmt.Printf("replicas equal: %v, loss below 0.1: %v\n", same, loss < 0.1)
	// Output:
	// replicas equal: true, loss below 0.1: true
}
