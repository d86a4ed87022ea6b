// Command zero-consolidate merges a sharded ZeRO-3 checkpoint (parallel/zero's Save: one
// shard file per rank plus a manifest) into one .npz with torchvision's state_dict keys,
// which checkpoint.LoadModel, a world-size-1 run or PyTorch's load_state_dict read.
//
//	zero-consolidate -ckpt runs/ckpt -out model.npz [-optim]
//
// -ckpt is a checkpoint root (its LATEST tag is used) or one tag's directory; -optim keeps
// the optimizer state, merged into whole-parameter "optim.<param>.<kind>" keys.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

func main() {
	ckpt := flag.String("ckpt", "", "checkpoint root or tag directory")
	out := flag.String("out", "", "output .npz path")
	withOptim := flag.Bool("optim", false, "include the optimizer state")
	flag.Parse()
	if *ckpt == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: zero-consolidate -ckpt DIR -out FILE.npz [-optim]")
		os.Exit(2)
	}
	if err := run(*ckpt, *out, *withOptim); err != nil {
		fmt.Fprintln(os.Stderr, "zero-consolidate:", err)
		os.Exit(1)
	}
}

func run(ckpt, out string, withOptim bool) error {
	entries, m, err := zero.Consolidate(ckpt, withOptim)
	if err != nil {
		return err
	}
	if err := checkpoint.Save(out, entries); err != nil {
		return err
	}
	fmt.Printf("%s: tag %s, written by %d ranks after %d steps, %d parameters (Ψ=%d), %d entries\n",
		out, m.Tag, m.World, m.Steps, len(m.Params), m.Psi, len(entries))
	return nil
}
