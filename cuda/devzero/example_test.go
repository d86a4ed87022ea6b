//go:build cgo

package devzero_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
)

// ZeRO-3 on a GPU: AdamW on the rank's shard on the device, checkpoints in parallel/zero's
// format, and a second engine resuming from the first one's checkpoint bit for bit. Under
// gprun or torchrun each rank would take launchenv.FromOS's LOCAL_RANK as its device and
// nccl.InitFromEnv's group; here one rank makes a group of one over a store on loopback.
// go test runs it on the fake driver and the kernel emulator (a cgo build: without cgo the
// CUDA libraries cannot load, and an Example cannot skip).
func Example() {
	ctx := context.Background()
	dev, err := cuda.Open(0)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	srv, err := store.Listen("127.0.0.1:0", 1)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	store, err := store.Dial(ctx, srv.Addr())
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	g, err := nccl.New(ctx, store, 0, 1, nccl.WithDevice(0))
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx)
	dir, err := os.MkdirTemp("", "devzero-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	build := gormlp.Fixed(1, 32)
	x, y := make([]float32, 32*gormlp.In), make([]float32, 32*gormlp.Out)
	// train runs steps [from, to) of a fresh engine (resumed from dir when from > 0) and
	// returns its last loss and parameters.
	train1 := func(from, to int) (float32, []float32) {
		m, err := nn.NewGraphModel(build)
		if err != nil {
			log.Fatal(err)
		}
		e, err := zero.New(ctx, m, g, zero.WithBackend(devzero.NewBackend(dev)),
			zero.WithOptimizer(zero.AdamW(1e-2)), zero.WithWeightDecay(0.01))
		if err != nil {
			log.Fatal(err)
		}
		defer e.Close()
		if from > 0 {
			if err := e.Load(dir); err != nil {
				log.Fatal(err)
			}
		}
		p, err := e.Compile(build)
		if err != nil {
			log.Fatal(err)
		}
		defer p.Close()
		var loss float32
		for step := from; step < to; step++ {
			gormlp.Data(x, y, step*32, 32)
			if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y), train.RunStep(ctx, p)); err != nil {
				log.Fatal(err)
			}
			if loss, err = p.LossValue(); err != nil {
				log.Fatal(err)
			}
			if step == 4 { // a collective: every rank saves
				if err := e.Save(ctx, dir, "step5"); err != nil {
					log.Fatal(err)
				}
			}
		}
		params, err := e.GatherParams(ctx)
		if err != nil {
			log.Fatal(err)
		}
		return loss, params
	}
	first, _ := train1(0, 1)
	last, straight := train1(0, 10)
	_, resumed := train1(5, 10)
	fmt.Println("loss fell:", last < first)
	fmt.Println("resumed from step 5, parameters equal a straight run's:", slices.Equal(resumed, straight))
	// Output:
	// loss fell: true
	// resumed from step 5, parameters equal a straight run's: true
}
