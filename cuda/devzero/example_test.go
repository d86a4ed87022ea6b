package devzero_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
)

// One rank of a ZeRO-3 job on GPUs, launched by gprun or torchrun (the rendezvous store and
// LOCAL_RANK come from the environment): AdamW on the rank's shard, on the device, or with
// zero.WithOffload(zero.OffloadCPU, 0) on the CPU; a checkpoint in parallel/zero's format
// every 5 steps, which either engine resumes. It needs a GPU and cgo, so it is compiled but not
// run by go test; TestTwoRanksMatchCPU runs the same calls on the emulator.
func Example() {
	ctx := context.Background()
	env, err := comm.EnvFromOS()
	if err != nil {
		log.Fatal(err)
	}
	dev, err := cuda.Open(env.LocalRank)
	if err != nil {
		log.Fatal(err) // e.g. "cuda: NVIDIA driver library libcuda.so.1 ...: built without cgo"
	}
	defer dev.Close()
	g, err := nccl.InitFromEnv(ctx, nccl.WithDevice(env.LocalRank))
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx)
	build := gormlp.Fixed(1, 32)
	m, err := nn.NewGraphModel(build)
	if err != nil {
		log.Fatal(err)
	}
	// New broadcasts rank 0's parameters; e.Optimizer() is the AdamW a scheduler sets.
	e, err := devzero.New(ctx, dev, m, g, zero.WithOptimizer(zero.AdamW(1e-3)), zero.WithWeightDecay(0.01))
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	p, err := e.Compile(build)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	x, y := make([]float32, 32*gormlp.In), make([]float32, 32*gormlp.Out)
	for step := range 10 {
		gormlp.Data(x, y, (step*g.Size()+g.Rank())*32, 32)
		_ = p.SetInput("x", x)
		_ = p.SetInput("y", y)
		if err := train.RunStep(ctx, p); err != nil {
			log.Fatal(err)
		}
		if step%5 == 4 { // collective: every rank calls it
			if err := e.Save(ctx, "ckpt", fmt.Sprintf("step%d", step+1)); err != nil {
				log.Fatal(err)
			}
		}
	}
	fmt.Printf("%+v\n", e.Memory())
}
