package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/nn"
)

// MomentumTarget is an optimizer whose momentum a schedule can move: SGD's momentum, Adam's
// and AdamW's beta1 (PyTorch's OneCycleLR cycles group['momentum'] or group['betas'][0]).
type MomentumTarget interface {
	// Momentum is SGD's momentum or Adam's beta1.
	Momentum() float64
	// SetMomentum changes it; an SGD made without momentum refuses, having no buffers.
	SetMomentum(m float64) error
}

// Momentum is SGD's momentum factor.
func (o *SGD) Momentum() float64 { return o.cfg.momentum }

// SetMomentum changes SGD's momentum factor (m >= 0). An SGD made without momentum keeps no
// momentum buffers and refuses.
func (o *SGD) SetMomentum(m float64) error {
	switch {
	case o.mom == nil:
		return fmt.Errorf("%w: SGD made without momentum cannot take momentum %g (make it with WithMomentum)", ErrBadHyperparameter, m)
	case m < 0 || math.IsNaN(m):
		return fmt.Errorf("%w: SGD momentum %g", ErrBadHyperparameter, m)
	}
	o.cfg.momentum = m
	return nil
}

// Momentum is Adam's beta1.
func (o *Adam) Momentum() float64 { return o.cfg.beta1 }

// SetMomentum changes Adam's beta1 (in [0, 1)).
func (o *Adam) SetMomentum(m float64) error {
	if !(m >= 0 && m < 1) {
		return fmt.Errorf("%w: %s beta1 %g (want [0, 1))", ErrBadHyperparameter, o.name(), m)
	}
	o.cfg.beta1 = m
	return nil
}

// ConstantLR is torch.optim.lr_scheduler.ConstantLR: the rate times factor for the first
// totalIters steps, then the rate itself (PyTorch defaults 1/3 and 5): a constant warmup.
type ConstantLR struct{ sched }

// NewConstantLR attaches a ConstantLR to opt.
func NewConstantLR(opt LRTarget, factor float64, totalIters int) (*ConstantLR, error) {
	if !(factor >= 0 && factor <= 1) || totalIters < 0 {
		return nil, fmt.Errorf("%w: ConstantLR factor %g (want [0,1]), total iters %d", ErrBadHyperparameter, factor, totalIters)
	}
	n := int64(totalIters)
	return &ConstantLR{newSched(opt,
		func(s *sched) float64 {
			switch {
			case s.lastEpoch == 0:
				return s.opt.LR() * factor
			case s.lastEpoch != n:
				return s.opt.LR()
			}
			return s.opt.LR() * (1 / factor)
		},
		func(s *sched) float64 {
			f := factor
			if s.lastEpoch >= n {
				f = 1
			}
			return s.baseLR * f
		},
	)}, nil
}

// PolynomialLR is torch.optim.lr_scheduler.PolynomialLR: the rate times
// (1 - t/totalIters)^power, reaching 0 at totalIters (PyTorch defaults 5 and 1).
type PolynomialLR struct{ sched }

// NewPolynomialLR attaches a PolynomialLR to opt.
func NewPolynomialLR(opt LRTarget, totalIters int, power float64) (*PolynomialLR, error) {
	if totalIters <= 0 || !(power >= 0) {
		return nil, fmt.Errorf("%w: PolynomialLR total iters %d, power %g", ErrBadHyperparameter, totalIters, power)
	}
	n := float64(totalIters)
	return &PolynomialLR{newSched(opt,
		func(s *sched) float64 {
			if s.lastEpoch == 0 || s.lastEpoch > int64(totalIters) {
				return s.opt.LR()
			}
			e := float64(s.lastEpoch)
			return s.opt.LR() * math.Pow((1-e/n)/(1-(e-1)/n), power)
		},
		func(s *sched) float64 {
			return s.baseLR * math.Pow(1-min(n, float64(s.lastEpoch))/n, power)
		},
	)}, nil
}

// OneCycle configures NewOneCycleLR; the zero value of a field means PyTorch's default.
type OneCycle struct {
	// PctStart is the share of the steps spent raising the rate (default 0.3).
	PctStart float64
	// Linear anneals linearly instead of by cosine (anneal_strategy='linear').
	Linear bool
	// NoCycleMomentum leaves the momentum alone (cycle_momentum=False).
	NoCycleMomentum bool
	// BaseMomentum and MaxMomentum bound the momentum's cycle (defaults 0.85 and 0.95).
	BaseMomentum, MaxMomentum float64
	// DivFactor sets the initial rate maxLR/DivFactor (default 25); FinalDivFactor the final
	// rate, initial/FinalDivFactor (default 1e4).
	DivFactor, FinalDivFactor float64
	// ThreePhase adds a third phase that anneals to the final rate (three_phase=True).
	ThreePhase bool
}

// OneCycleLR is torch.optim.lr_scheduler.OneCycleLR: the rate rises from maxLR/DivFactor to
// maxLR over the first PctStart of totalSteps and anneals to a far smaller final rate over
// the rest, while the momentum (SGD's momentum, Adam's beta1) moves the other way between
// MaxMomentum and BaseMomentum. It is stepped after every optimizer step; past totalSteps
// (where PyTorch raises) the rate and momentum keep their last values.
type OneCycleLR struct {
	sched
	mt       MomentumTarget // nil without momentum cycling
	momErr   error
	phaseEnd []float64
	lrs      [][2]float64 // per phase: start and end rate
	moms     [][2]float64 // per phase: start and end momentum
	linear   bool
	total    int64
}

// NewOneCycleLR attaches a OneCycleLR to opt for totalSteps steps. With momentum cycling (the
// default) opt must be a MomentumTarget with momentum (an SGD made WithMomentum, Adam,
// AdamW).
func NewOneCycleLR(opt LRTarget, maxLR float64, totalSteps int, c OneCycle) (*OneCycleLR, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.PctStart, 0.3)
	def(&c.BaseMomentum, 0.85)
	def(&c.MaxMomentum, 0.95)
	def(&c.DivFactor, 25)
	def(&c.FinalDivFactor, 1e4)
	switch {
	case totalSteps <= 0:
		return nil, fmt.Errorf("%w: OneCycleLR total steps %d <= 0", ErrBadHyperparameter, totalSteps)
	case !(maxLR > 0) || math.IsInf(maxLR, 0):
		return nil, fmt.Errorf("%w: OneCycleLR max lr %g", ErrBadHyperparameter, maxLR)
	case !(c.PctStart > 0 && c.PctStart < 1):
		return nil, fmt.Errorf("%w: OneCycleLR pct_start %g (want (0, 1))", ErrBadHyperparameter, c.PctStart)
	case !(c.DivFactor > 0) || !(c.FinalDivFactor > 0):
		return nil, fmt.Errorf("%w: OneCycleLR div factors %g, %g", ErrBadHyperparameter, c.DivFactor, c.FinalDivFactor)
	}
	initial := maxLR / c.DivFactor
	final := initial / c.FinalDivFactor
	o := &OneCycleLR{linear: c.Linear, total: int64(totalSteps)}
	n := float64(totalSteps)
	bm, mm := c.BaseMomentum, c.MaxMomentum
	if c.ThreePhase {
		o.phaseEnd = []float64{c.PctStart*n - 1, 2*c.PctStart*n - 2, n - 1}
		o.lrs = [][2]float64{{initial, maxLR}, {maxLR, initial}, {initial, final}}
		o.moms = [][2]float64{{mm, bm}, {bm, mm}, {mm, mm}}
	} else {
		o.phaseEnd = []float64{c.PctStart*n - 1, n - 1}
		o.lrs = [][2]float64{{initial, maxLR}, {maxLR, final}}
		o.moms = [][2]float64{{mm, bm}, {bm, mm}}
	}
	if !c.NoCycleMomentum {
		mt, ok := opt.(MomentumTarget)
		if !ok {
			return nil, fmt.Errorf("%w: OneCycleLR cycles the momentum, which %T does not have (or set NoCycleMomentum)", ErrBadHyperparameter, opt)
		}
		if err := mt.SetMomentum(mm); err != nil {
			return nil, fmt.Errorf("optim: OneCycleLR: %w", err)
		}
		o.mt = mt
	}
	// PyTorch sets the group's rate to the initial one before the first step.
	opt.SetLR(initial)
	closed := func(s *sched) float64 { return o.at(s.lastEpoch) }
	o.sched = newSched(opt, closed, closed)
	if o.momErr != nil {
		return nil, o.momErr
	}
	return o, nil
}

// at returns the rate of step t and moves the momentum to its value there.
func (o *OneCycleLR) at(t int64) float64 {
	t = min(t, o.total)
	step := float64(t)
	start := 0.0
	for i, end := range o.phaseEnd {
		if step <= end || i == len(o.phaseEnd)-1 {
			pct := (step - start) / (end - start)
			if o.mt != nil {
				if err := o.mt.SetMomentum(o.anneal(o.moms[i][0], o.moms[i][1], pct)); err != nil && o.momErr == nil {
					o.momErr = err
				}
			}
			return o.anneal(o.lrs[i][0], o.lrs[i][1], pct)
		}
		start = end
	}
	return o.lrs[len(o.lrs)-1][1]
}

func (o *OneCycleLR) anneal(from, to, pct float64) float64 {
	if o.linear {
		return (to-from)*pct + from
	}
	return to + (from-to)/2*(math.Cos(math.Pi*pct)+1)
}

// LoadStateDict restores the position and moves the momentum to its value there (the
// optimizer's state dict does not hold the momentum, PyTorch's param group does).
func (o *OneCycleLR) LoadStateDict(entries []nn.StateEntry) error {
	if err := o.sched.LoadStateDict(entries); err != nil {
		return err
	}
	o.at(o.lastEpoch)
	return errors.Join(o.momErr)
}
