// Command imagenet trains and evaluates ResNet and Swin models on ImageNet-style data, with
// the flags of PyTorch's examples/imagenet/main.py. Run it on one process, or on several
// through gprun (DDP over the torchrun environment):
//
//	gprun --nproc-per-node 2 -- imagenet -data DIR -arch resnet18 -b 64 -epochs 10
//	mpirun -np 2 imagenet -data DIR -arch resnet18   # MPI collectives (parallel/comm/mpi)
//	imagenet -data-format synthetic -data /tmp/synth -arch resnet18 -image-size 32 -epochs 3
//
// It is a thin layer over the library's trainer.Trainer: the flags and each architecture's
// recipe (config.go), the data sets (data.go, fashion.go) and the augmentation flags
// (augment.go) become trainer options, a trainer.Model and a trainer.Source (run.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/gorgonia-parallel/gp/internal/blasimpl"
	_ "github.com/gorgonia-parallel/gp/parallel/comm/mpi" // GP_COMM_BACKEND=mpi, and by default under mpirun
)

func main() {
	var cfg Config
	fs := flag.NewFlagSet("imagenet", flag.ExitOnError)
	cfg.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "imagenet:", err)
		os.Exit(1)
	}
}
