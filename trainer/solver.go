package trainer

import (
	"errors"
	"slices"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/optim/gsolver"
)

// solverOptimizer is the Solver option's gorgonia solver as the optimizer the trainer drives: the schedule sets
// its learning rate and checkpoints hold its state (gsolver.State); its program steps it
// (nn.WithSolver), so Step is never the trainer's to call.
type solverOptimizer struct {
	*gsolver.State
	params *nn.ParamSet
}

func newSolverOptimizer(st *gsolver.State, ps *nn.ParamSet, lr float64) solverOptimizer {
	st.SetLR(lr)
	st.Expect(len(ps.Params))
	return solverOptimizer{State: st, params: ps}
}

func (o solverOptimizer) Step() error {
	return errors.New("trainer: a gorgonia solver is stepped by its program (nn.WithSolver), not by the trainer")
}

func (o solverOptimizer) ZeroGrad() { clear(o.params.Grad) }

var _ optim.Optimizer = solverOptimizer{}

// solverStrategies lists the -strategy values whose program a gorgonia solver can step.
func solverStrategies() []string {
	var names []string
	for name, s := range strategies {
		if s.solver {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
