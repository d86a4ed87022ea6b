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

// A plain gorgonia program (its own graph, G.Grad, tape machine and loop) made data-parallel
// by wrapping its solver: NewSolver copies rank 0's weights to every rank and Step averages
// the gradients before gorgonia's Adam updates. Two ranks run as goroutines here, with
// WithGroup; under gprun, NewSolver starts the group from the environment itself (see
// examples/gorgonia/solver, the same program in five added lines).
func ExampleNewSolver() {
	const world = 2
	groups := comm.NewLocalGroups(world)
	weights := make([][]float32, world)
	losses := make([]float32, world)
	errs := make([]error, world)
	var mu sync.Mutex // gorgonia's graph construction is not thread-safe
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer groups[r].Close(context.Background())
			errs[r] = func() error {
				mu.Lock()
				g := G.NewGraph()
				x := G.NewMatrix(g, tensor.Float32, G.WithShape(8, 4), G.WithName("x"), G.WithInit(G.Zeroes()))
				y := G.NewMatrix(g, tensor.Float32, G.WithShape(8, 1), G.WithName("y"), G.WithInit(G.Zeroes()))
				w := G.NewMatrix(g, tensor.Float32, G.WithShape(4, 1), G.WithName("w"), G.WithInit(G.GlorotU(1))) // from the clock: differs per rank
				loss := G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(G.Must(G.Mul(x, w)), y))))))
				_, err := G.Grad(loss, w)
				vm := G.NewTapeMachine(g, G.BindDualValues(w))
				mu.Unlock()
				if err != nil {
					return err
				}
				defer vm.Close()
				solver, err := ddp.NewSolver(context.Background(), G.NewAdamSolver(G.WithLearnRate(0.05)), g, ddp.WithGroup(groups[r]))
				if err != nil {
					return err
				}
				defer solver.Close()
				rng := rand.New(rand.NewSource(int64(r))) // each rank its own samples of y = x·[1 2 3 4]
				xs, ys := x.Value().Data().([]float32), y.Value().Data().([]float32)
				for range 300 {
					for i := range 8 {
						ys[i] = 0
						for j := range 4 {
							xs[4*i+j] = float32(rng.NormFloat64())
							ys[i] += xs[4*i+j] * float32(j+1)
						}
					}
					vm.Reset()
					if err := vm.RunAll(); err != nil {
						return err
					}
					if err := solver.Step(G.NodesToValueGrads(G.Nodes{w})); err != nil {
						return err
					}
				}
				weights[r] = w.Value().Data().([]float32)
				losses[r], err = solver.Mean(loss.Value().Data().(float32)) // the global batch's loss
				return err
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
	same := true
	for i := range weights[0] {
		same = same && weights[0][i] == weights[1][i]
	}
	fmt.Printf("ranks equal: %v, same global loss: %v\n", same, losses[0] == losses[1])
	fmt.Printf("w ≈ [%.1f %.1f %.1f %.1f]\n", weights[0][0], weights[0][1], weights[0][2], weights[0][3])
	// Output:
	// ranks equal: true, same global loss: true
	// w ≈ [1.0 2.0 3.0 4.0]
}
