// Command trainer trains a plain gorgonia convnet (G.Conv2d, G.MaxPool2D, G.Mul, gorgonia's
// Adam solver) under DistributedDataParallel with package trainer: checkpoints and resume,
// validation, metrics.jsonl, TensorBoard events, curves.png, a progress bar or lines, and a
// summary. The task: find the bright quadrant of a noisy 16x16 image. Run again with more
// epochs and it goes on from its last checkpoint.
//
//	go build -o bin/gprun ./cmd/gprun && go build -o bin/examples/ ./examples/gorgonia/...
//	bin/gprun --nproc-per-node 2 -- bin/examples/trainer -epochs 2 -out runs/convnet
package main

import (
	"context"
	"flag"
	"log"
	"math"
	"math/rand/v2"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/trainer"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func main() {
	epochs := flag.Int("epochs", 2, "epochs in all (a rerun resumes from the last checkpoint)")
	out := flag.String("out", "runs/convnet", "run directory: checkpoints, metrics.jsonl, curves.png")
	flag.Parse()
	t, err := trainer.New(trainer.WithEpochs(*epochs), trainer.WithBatchSize(32), trainer.WithDir(*out), trainer.WithStrategy("ddp"),
		trainer.WithOptimizer(trainer.Solver(G.NewAdamSolver(G.WithLearnRate(0.003)))), trainer.WithProgress("", 5))
	if err != nil {
		log.Fatal(err)
	}
	src := trainer.BatchSource{Train: quadrants, Steps: 20, Val: quadrants, ValSteps: 4, Shape: [3]int{1, 16, 16}, Classes: 4}
	if _, err := t.Fit(context.Background(), trainer.Graph(convnet).Named("convnet"), src); err != nil {
		log.Fatal(err)
	}
}

// quadrants fills b with noisy 16x16 images, each with one bright quadrant, its label.
func quadrants(_ context.Context, at trainer.BatchAt, b *data.Batch) error {
	rng := rand.New(rand.NewPCG(uint64(at.Epoch+1), uint64(at.Index*at.World+at.Rank)))
	*b = data.Batch{Images: make([]float32, at.N*256), Labels: make([]int64, at.N), N: at.N, C: 1, H: 16, W: 16}
	for k := range at.N {
		q := rng.IntN(4)
		b.Labels[k] = int64(q)
		for p := range 256 {
			b.Images[k*256+p] = float32(rng.NormFloat64()) / 2
			if p/16/8 == q/2 && p%16/8 == q%2 {
				b.Images[k*256+p]++
			}
		}
	}
	return nil
}

// convnet is the model: conv 1→8 3x3, ReLU, max-pool 2, conv 8→16 3x3, ReLU, max-pool 2,
// then a dense layer from the 16×4×4 features to the 4 classes.
func convnet(b *nn.Builder, x *G.Node) (*G.Node, error) {
	h := x
	for i, shape := range [][]int{{8, 1, 3, 3}, {16, 8, 3, 3}} {
		w, err := weight(b, i, shape...)
		if err != nil {
			return nil, err
		}
		if h, err = G.Conv2d(h, w, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}); err != nil {
			return nil, err
		}
		if h, err = G.Rectify(h); err != nil {
			return nil, err
		}
		if h, err = G.MaxPool2D(h, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}); err != nil {
			return nil, err
		}
	}
	h, err := G.Reshape(h, tensor.Shape{x.Shape()[0], 16 * 4 * 4})
	if err != nil {
		return nil, err
	}
	w, err := weight(b, 2, 16*4*4, 4)
	if err != nil {
		return nil, err
	}
	return G.Mul(h, w)
}

// weight creates the model's weight i of shape on b's graph, uniform in ±sqrt(3/fan-in)
// from a fixed seed, and adopts it as a learnable (rank 0's values reach every rank).
func weight(b *nn.Builder, i int, shape ...int) (*G.Node, error) {
	rng := rand.New(rand.NewPCG(uint64(i+1), 5))
	v := make([]float32, tensor.Shape(shape).TotalSize())
	fanIn := shape[0] // a [in, out] matrix
	if len(shape) == 4 {
		fanIn = shape[1] * shape[2] * shape[3] // an [out, in, kh, kw] filter
	}
	for j := range v {
		v[j] = float32((2*rng.Float64() - 1) * math.Sqrt(3/float64(fanIn)))
	}
	w := G.NewTensor(b.Graph, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName("w"+string(rune('0'+i))),
		G.WithValue(tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))))
	return b.Learnable(w)
}
