package trainer

import (
	"fmt"
	"strings"

	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/optim/gsolver"
	G "gorgonia.org/gorgonia"
)

// Optimizer is what steps the model: one of optim's (SGD, AdamW, or any through
// CustomOptimizer) made over each rank's parameters, or a gorgonia solver (Solver). Its
// learning rate is the schedule's peak (WithSchedule); its state is in every checkpoint.
type Optimizer struct {
	name string
	lr   float64
	mom  float64
	make func(segs []optim.Segment, lr float64) (optim.Optimizer, error)
	gs   G.Solver
}

// SGD is torch.optim.SGD with momentum (0: none) at learning rate lr.
func SGD(lr, momentum float64) Optimizer {
	return Optimizer{name: "sgd", lr: lr, mom: momentum, make: func(segs []optim.Segment, lr float64) (optim.Optimizer, error) {
		return optim.NewSGD(segs, lr, optim.WithMomentum(momentum))
	}}
}

// AdamW is torch.optim.AdamW at learning rate lr (the decay is WithWeightDecay's). ZeRO-3
// steps it with its fused shard update; it is the optimizer ZeRO-3 on a GPU steps.
func AdamW(lr float64) Optimizer {
	return Optimizer{name: "adamw", lr: lr, make: func(segs []optim.Segment, lr float64) (optim.Optimizer, error) {
		return optim.NewAdamW(segs, lr)
	}}
}

// CustomOptimizer is any optim.Optimizer, made by fn over the segments a rank steps (all
// parameters, or its ZeRO-3 shard) at learning rate lr; name is what the run's first line
// calls it.
func CustomOptimizer(name string, lr float64, fn func(segs []optim.Segment, lr float64) (optim.Optimizer, error)) Optimizer {
	return Optimizer{name: name, lr: lr, make: fn}
}

// Solver steps the model with a gorgonia solver (G.NewAdamSolver(...) and the others
// optim/gsolver captures) under the ddp and none strategies on the CPU. A solver holds one
// rank's state: ranks run as goroutines of one process (WithGroup) need one each. Its
// state is checkpointed (a solver whose state cannot be captured is refused by New), the
// schedule sets its learning rate (starting from the solver's own), and its weight decay
// is its own (G.WithL2Reg), not WithWeightDecay's.
func Solver(s G.Solver) Optimizer {
	return Optimizer{name: "solver", gs: s}
}

// WithLR returns o at learning rate lr (for a Solver: in place of the solver's own, which
// 0 keeps).
func (o Optimizer) WithLR(lr float64) Optimizer {
	o.lr = lr
	return o
}

// WithOptimizer sets the optimizer (default SGD(0.1, 0.9)). A learning rate that is
// negative, NaN or infinite is refused, as PyTorch's optimizers refuse it.
func WithOptimizer(o Optimizer) Option {
	return func(s *settings) error {
		if o.make == nil && o.gs == nil {
			return fmt.Errorf("trainer: WithOptimizer: the zero Optimizer; use SGD, AdamW, Solver or CustomOptimizer")
		}
		if o.gs == nil && !finiteNonNeg(o.lr) {
			return fmt.Errorf("trainer: WithOptimizer: %s learning rate %g: want a finite number >= 0", o.name, o.lr)
		}
		s.Optimizer, s.LR, s.Momentum, s.newOpt, s.Solver = o.name, o.lr, o.mom, o.make, o.gs
		s.solver = nil
		return nil
	}
}

// checkSolver accepts s.Solver (a gorgonia solver) where the trainer can step and
// checkpoint it: gsolver captures its state (else its error, now rather than at the first
// checkpoint), on the CPU, under a strategy whose program steps the whole model
// (strategy.solver). A learning rate left at 0 is the solver's own.
func (s *settings) checkSolver() error {
	if s.Solver == nil {
		return nil
	}
	st, err := gsolver.Of(s.Solver)
	if err != nil {
		return fmt.Errorf("trainer: Solver (a gorgonia solver): %w", err)
	}
	strat, err := strategyOf(s.Strategy)
	switch {
	case err != nil:
		return err
	case !strat.solver:
		return fmt.Errorf("trainer: a gorgonia solver with strategy %s: it steps the whole model in one program, so it needs strategy %s",
			s.Strategy, strings.Join(solverStrategies(), " or "))
	case s.Device != "" && s.Device != "cpu":
		return fmt.Errorf("trainer: a gorgonia solver with device %s: gorgonia's solvers step on the CPU; use device cpu, or SGD or AdamW", s.Device)
	}
	if s.LR == 0 {
		s.LR = st.LR()
	}
	s.solver = st
	return nil
}

// newOptimizer is the settings' optimizer over segs.
func newOptimizer(s *settings, segs []optim.Segment) (optim.Optimizer, error) {
	if s.newOpt == nil {
		return optim.NewSGD(segs, s.LR, optim.WithMomentum(s.Momentum))
	}
	return s.newOpt(segs, s.LR)
}

// Schedule is the learning rate over the run, per optimizer step: an optional linear
// warmup over WarmupEpochs from WarmupLR (0: 1% of the optimizer's rate; timm's
// --warmup-lr), then Name's curve from the optimizer's rate:
//   - "constant" (the default): held;
//   - "step": ×0.1 every 30 epochs, as PyTorch's examples/imagenet;
//   - "cosine": cosine annealing to MinLR at the last step (timm's --min-lr);
//   - "poly": (1-t/T)^PolyPower (0: 1) to 0, PyTorch's PolynomialLR;
//   - "onecycle": PyTorch's OneCycleLR over every step, peaking at the optimizer's rate
//     after PctStart (0: 0.3) of them; it has its own rise, so no WarmupEpochs.
type Schedule struct {
	Name                string
	WarmupEpochs        int
	WarmupLR, MinLR     float64
	PolyPower, PctStart float64
}

// WithSchedule sets the learning-rate schedule.
func WithSchedule(sc Schedule) Option {
	return func(s *settings) error {
		if sc.Name == "" {
			sc.Name = "constant"
		}
		switch sc.Name {
		case "step", "cosine", "poly", "constant":
		case "onecycle":
			if sc.WarmupEpochs > 0 {
				return fmt.Errorf("trainer: schedule onecycle has its own rise (PctStart): drop WarmupEpochs %d", sc.WarmupEpochs)
			}
		default:
			return fmt.Errorf("trainer: unknown schedule %q (step, cosine, onecycle, poly or constant)", sc.Name)
		}
		if sc.WarmupEpochs < 0 || !finiteNonNeg(sc.WarmupLR) || !finiteNonNeg(sc.MinLR) || sc.PolyPower < 0 || sc.PctStart < 0 || sc.PctStart >= 1 {
			return fmt.Errorf("trainer: schedule %+v: want WarmupEpochs, WarmupLR, MinLR and PolyPower >= 0 and PctStart in [0, 1)", sc)
		}
		if sc.PolyPower == 0 {
			sc.PolyPower = 1
		}
		if sc.PctStart == 0 {
			sc.PctStart = 0.3
		}
		s.Sched, s.Warmup, s.WarmupLR, s.MinLR, s.PolyPower, s.PctStart = sc.Name, sc.WarmupEpochs, sc.WarmupLR, sc.MinLR, sc.PolyPower, sc.PctStart
		return nil
	}
}
