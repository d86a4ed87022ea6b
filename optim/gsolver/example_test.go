package gsolver_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim/gsolver"
	G "gorgonia.org/gorgonia"
)

// A gorgonia program checkpoints its AdamSolver with checkpoint.SaveState and resumes it
// with checkpoint.LoadState: Of is called when the solver is made, so an unsupported
// solver fails there, not at the first save.
func Example() {
	p, _ := gormlp.NewPlain(1, 8)
	solver := G.NewAdamSolver(G.WithLearnRate(0.01))
	st, err := gsolver.Of(solver)
	if err != nil {
		fmt.Println(err)
		return
	}
	for step := range 3 {
		if _, err := p.Step(solver, step*8); err != nil {
			fmt.Println(err)
			return
		}
	}
	dir, _ := os.MkdirTemp("", "gsolver")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ckpt.npz")
	if err := checkpoint.SaveState(path, &checkpoint.State{Optimizer: st, Step: 3}); err != nil {
		fmt.Println(err)
		return
	}

	resumed := G.NewAdamSolver(G.WithLearnRate(0.01))
	rst, _ := gsolver.Of(resumed)
	meta := &checkpoint.State{Optimizer: rst}
	if _, err := checkpoint.LoadState(path, meta); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("resumed at step", meta.Step, "lr", rst.LR())

	_, err = gsolver.Of(G.NewBarzilaiBorweinSolver())
	fmt.Println(err != nil)
	// Output:
	// resumed at step 3 lr 0.01
	// true
}
