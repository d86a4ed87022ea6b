package trainer

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/optim/gsolver"
)

// checkSolver accepts cfg.Solver (a gorgonia solver) where the trainer can step and
// checkpoint it: gsolver captures its state (else its error, now rather than at the first
// checkpoint), on the CPU, under a strategy whose program steps the whole model
// (strategy.solver). A learning rate left at 0 is the solver's own.
func (c *Config) checkSolver() error {
	if c.Solver == nil {
		return nil
	}
	st, err := gsolver.Of(c.Solver)
	if err != nil {
		return fmt.Errorf("trainer: Config.Solver: %w", err)
	}
	strat, err := strategyOf(c.Strategy)
	switch {
	case err != nil:
		return err
	case !strat.solver:
		return fmt.Errorf("trainer: Config.Solver (a gorgonia solver) with -strategy %s: it steps the whole model in one program, so it needs -strategy %s",
			c.Strategy, strings.Join(solverStrategies(), " or "))
	case c.Device != "" && c.Device != "cpu":
		return fmt.Errorf("trainer: Config.Solver (a gorgonia solver) with -device %s: gorgonia's solvers step on the CPU; use -device cpu, or -opt sgd|adamw", c.Device)
	}
	if c.LR == 0 {
		c.LR = st.LR()
	}
	c.solver = st
	return nil
}

// solverOptimizer is Config.Solver as the optimizer the trainer drives: the schedule sets
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
