// Command solver is examples/gorgonia/single under DistributedDataParallel in five added and
// three changed lines: the same graph, G.Grad, tape machine and loop; ddp.NewSolver starts
// the process group, copies rank 0's weights to every rank, and its Step averages the
// gradients over the ranks before gorgonia's solver updates; each rank feeds its share of
// every global batch.
//
//	go build -o bin/gprun ./cmd/gprun && go build -o bin/solver ./examples/gorgonia/solver
//	bin/gprun --nproc-per-node 2 -- bin/solver -steps 300 -solver adam
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
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
	kind := flag.String("solver", "adam", "gorgonia solver: vanilla, momentum, adam or rmsprop")
	save := flag.String("save", "", "write the final weights (float32, little-endian, w1 then w2) to this file; $RANK and other variables are expanded")
	flag.Parse()
	if solvers[*kind] == nil {
		log.Fatalf("-solver %q: want vanilla, momentum, adam or rmsprop", *kind)
	}
	if err := run(*steps, *kind, os.ExpandEnv(*save)); err != nil {
		log.Fatal(err)
	}
}

func run(steps int, kind, save string) error {
	rank, world := launchenv.Launched()
	n := batch / world // samples per step in this process
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(n, in), G.WithName("x"), G.WithInit(G.Zeroes()))
	y := G.NewMatrix(g, tensor.Float32, G.WithShape(n, out), G.WithName("y"), G.WithInit(G.Zeroes()))
	w1, w2 := learnables(g)
	loss, err := forward(x, y, w1, w2)
	if err != nil {
		return err
	}
	if _, err := G.Grad(loss, w1, w2); err != nil {
		return err
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(w1, w2))
	defer vm.Close()
	solver, err := ddp.NewSolver(context.Background(), solvers[kind](), g)
	if err != nil {
		return err
	}
	defer solver.Close()

	for step := range steps {
		samples(x.Value().Data().([]float32), y.Value().Data().([]float32), step*batch+rank*n, n)
		if err := vm.RunAll(); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if err := solver.Step(G.NodesToValueGrads(G.Nodes{w1, w2})); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		vm.Reset()
		report(step, steps, loss.Value().Data().(float32))
	}
	sum := checksum(w1.Value().Data().([]float32)) + checksum(w2.Value().Data().([]float32))
	fmt.Printf("final loss %.4f, sum of weights %.6f\n", loss.Value().Data().(float32), sum)
	return write(save, w1, w2)
}

// solvers are gorgonia's solvers, with learning rates the task trains well at.
var solvers = map[string]func() G.Solver{
	"vanilla":  func() G.Solver { return G.NewVanillaSolver(G.WithLearnRate(0.05)) },
	"momentum": func() G.Solver { return G.NewMomentum(G.WithLearnRate(0.02), G.WithMomentum(0.9)) },
	"adam":     func() G.Solver { return G.NewAdamSolver(G.WithLearnRate(0.01)) },
	"rmsprop":  func() G.Solver { return G.NewRMSPropSolver(G.WithLearnRate(0.005)) },
}

// learnables creates the weights on g, Glorot-uniform as gorgonia's G.GlorotU(1) but from a
// fixed seed, so that runs can be compared weight for weight.
func learnables(g *G.ExprGraph) (w1, w2 *G.Node) {
	w1 = G.NewMatrix(g, tensor.Float32, G.WithShape(in, hidden), G.WithName("w1"), G.WithInit(glorot(1)))
	w2 = G.NewMatrix(g, tensor.Float32, G.WithShape(hidden, out), G.WithName("w2"), G.WithInit(glorot(2)))
	return w1, w2
}

// glorot draws U(-a, a) with a = sqrt(6/(fan_in+fan_out)) from a generator seeded with seed.
func glorot(seed uint64) G.InitWFn {
	return func(_ tensor.Dtype, shape ...int) interface{} {
		rng := rand.New(rand.NewPCG(seed, 7))
		a := math.Sqrt(6 / float64(shape[0]+shape[1]))
		v := make([]float32, shape[0]*shape[1])
		for i := range v {
			v[i] = float32((2*rng.Float64() - 1) * a)
		}
		return v
	}
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

// write saves the weights' values to path (nothing when path is empty).
func write(path string, ws ...*G.Node) error {
	if path == "" {
		return nil
	}
	var buf []byte
	for _, w := range ws {
		for _, v := range w.Value().Data().([]float32) {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		return fmt.Errorf("-save: %w", err)
	}
	return nil
}
