// Command ddp trains the perceptron of examples/gorgonia/single with DistributedDataParallel:
// one process per rank, each on its share of the global batch, gorgonia's Adam stepping
// the all-reduced gradients.
//
//	go build -o bin/gprun ./cmd/gprun && go build -o bin/ddp ./examples/gorgonia/ddp
//	bin/gprun --nproc-per-node 2 -- bin/ddp -steps 300
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The task: y = sin(x0) + x1·x2 − x3/2 from x ~ N(0, 1)^8, learned from global batches of 64.
const (
	batch  = 64
	in     = 8
	hidden = 32
	out    = 1
)

func main() {
	steps := flag.Int("steps", 300, "training steps")
	flag.Parse()
	if err := run(*steps); err != nil {
		log.Fatal(err)
	}
}

func run(steps int) error {
	ctx := context.Background()
	// One rank of several on this host: the runtime's monitor thread yields the cores to the
	// compute (parallel/sysmon), as in every program the launcher starts.
	if _, err := sysmon.Lower(); err != nil {
		return err
	}
	group, err := comm.InitFromEnv(ctx) // RANK, WORLD_SIZE, ... from gprun
	if err != nil {
		return err
	}
	defer group.Close(ctx)
	n := batch / group.Size() // each rank its share of the global batch
	build := func(b *nn.Builder) (*G.Node, error) { return mlp(b, n) }
	m, err := nn.NewGraphModel(build)
	if err != nil {
		return err
	}
	d, err := ddp.New(ctx, m, group) // checks the ranks' models agree, broadcasts rank 0's
	if err != nil {
		return err
	}
	p, err := d.Compile(build, nn.WithSolver(G.NewAdamSolver(G.WithLearnRate(0.01))))
	if err != nil {
		return err
	}
	defer p.Close()

	x, y := make([]float32, n*in), make([]float32, n*out)
	for step := range steps {
		samples(x, y, step*batch+group.Rank()*n, n)
		if err := p.SetInput("x", x); err != nil {
			return err
		}
		if err := p.SetInput("y", y); err != nil {
			return err
		}
		if err := train.RunStep(ctx, p); err != nil { // forward, backward + all-reduce, Adam
			return fmt.Errorf("step %d: %w", step, err)
		}
		loss, err := train.GlobalLoss(ctx, p) // the mean over the ranks: the global batch's loss
		if err != nil {
			return err
		}
		if group.Rank() == 0 {
			report(step, steps, loss)
		}
	}
	loss, err := train.GlobalLoss(ctx, p)
	if err != nil {
		return err
	}
	fmt.Printf("final loss %.4f, sum of weights %.6f\n", loss, checksum(m.Params.Data))
	return nil
}

// mlp is the perceptron for nn's compilers, for batches of n: inputs through b.Input, each
// learnable through b.Learnable, which binds it to the model's parameter memory.
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

// learnables creates the weights on g, initialised as gorgonia's examples do.
func learnables(g *G.ExprGraph) (w1, w2 *G.Node) {
	w1 = G.NewMatrix(g, tensor.Float32, G.WithShape(in, hidden), G.WithName("w1"), G.WithInit(G.GlorotU(1)))
	w2 = G.NewMatrix(g, tensor.Float32, G.WithShape(hidden, out), G.WithName("w2"), G.WithInit(G.GlorotU(1)))
	return w1, w2
}

// forward is the mean squared error of relu(x·w1)·w2 against y.
func forward(x, y, w1, w2 *G.Node) (*G.Node, error) {
	h, err := G.Rectify(G.Must(G.Mul(x, w1)))
	if err != nil {
		return nil, err
	}
	d, err := G.Sub(G.Must(G.Mul(h, w2)), y)
	if err != nil {
		return nil, err
	}
	return G.Mean(G.Must(G.Square(d)))
}

// samples writes samples first..first+n-1 of the task into x [n,in] and y [n,out]. Sample i
// is the same whoever draws it, so every strategy trains on the same global batches.
func samples(x, y []float32, first, n int) {
	for i := range n {
		rng := rand.New(rand.NewPCG(uint64(first+i), 1))
		xi := x[i*in : (i+1)*in]
		for j := range xi {
			xi[j] = float32(rng.NormFloat64())
		}
		y[i] = float32(math.Sin(float64(xi[0]))) + xi[1]*xi[2] - xi[3]/2
	}
}

func report(step, steps int, loss float32) {
	if step%50 == 0 || step == steps-1 {
		fmt.Printf("step %4d  loss %.4f\n", step, loss)
	}
}

func checksum(v []float32) float64 {
	var s float64
	for _, e := range v {
		s += float64(e)
	}
	return s
}
