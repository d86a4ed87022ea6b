package optim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/gorgonia-parallel/gp/nn"
)

// LRTarget is what a scheduler drives: an optimizer's learning rate. Every Optimizer is one.
type LRTarget interface {
	LR() float64
	SetLR(lr float64)
}

// initialLRer is PyTorch's param_group['initial_lr']: set by the first scheduler attached,
// shared by the others. Targets without it use their learning rate at attachment.
type initialLRer interface{ initialLRValue() float64 }

// Scheduler changes an optimizer's learning rate once per Step, as PyTorch's LR schedulers
// do: construct it after the optimizer (which sets the step-0 rate), call Step after each
// optimizer step (or epoch).
type Scheduler interface {
	// Step advances the schedule by one and sets the optimizer's learning rate.
	Step()
	// LR is the learning rate the last Step (or the constructor) set.
	LR() float64
	// StateDict returns the schedule's position, keyed "sched.*".
	StateDict() []nn.StateEntry
	// LoadStateDict restores a position saved by StateDict.
	LoadStateDict(entries []nn.StateEntry) error
}

// SchedPrefix starts every scheduler state key.
const SchedPrefix = "sched."

// sched is _LRScheduler: the recursive (chainable) get_lr plus the closed form used when
// SequentialLR restarts a scheduler at epoch 0.
type sched struct {
	opt       LRTarget
	baseLR    float64
	lastEpoch int64
	stepCount int64
	lastLR    float64
	getLR     func(s *sched) float64
	closed    func(s *sched) float64
}

func newSched(opt LRTarget, getLR, closed func(s *sched) float64) sched {
	s := sched{opt: opt, lastEpoch: -1, getLR: getLR, closed: closed}
	if il, ok := opt.(initialLRer); ok {
		s.baseLR = il.initialLRValue()
	} else {
		s.baseLR = opt.LR()
	}
	s.initialStep()
	return s
}

func (s *sched) initialStep() {
	s.stepCount = 0
	s.Step()
}

// Step advances the schedule by one and sets the optimizer's learning rate.
func (s *sched) Step() {
	s.stepCount++
	s.lastEpoch++
	s.set(s.getLR(s))
}

// stepTo is step(epoch): jump to epoch using the closed form.
func (s *sched) stepTo(epoch int64) {
	s.stepCount++
	s.lastEpoch = epoch
	s.set(s.closed(s))
}

func (s *sched) set(lr float64) {
	s.opt.SetLR(lr)
	s.lastLR = lr
}

// LR is the learning rate the last step set.
func (s *sched) LR() float64 { return s.lastLR }

// StateDict returns "sched.last_epoch", "sched.step_count", "sched.base_lr", "sched.last_lr".
func (s *sched) StateDict() []nn.StateEntry { return s.state(SchedPrefix) }

// LoadStateDict restores the position saved by StateDict.
func (s *sched) LoadStateDict(entries []nn.StateEntry) error {
	return s.load(SchedPrefix, indexByName(entries))
}

func (s *sched) state(prefix string) []nn.StateEntry {
	return []nn.StateEntry{
		{Name: prefix + "last_epoch", Shape: []int{}, I64: []int64{s.lastEpoch}},
		{Name: prefix + "step_count", Shape: []int{}, I64: []int64{s.stepCount}},
		{Name: prefix + "base_lr", Shape: []int{}, F64: []float64{s.baseLR}},
		{Name: prefix + "last_lr", Shape: []int{}, F64: []float64{s.lastLR}},
	}
}

func (s *sched) load(prefix string, idx map[string]nn.StateEntry) error {
	var err error
	geti := func(k string) int64 {
		e, ok := idx[prefix+k]
		if err == nil && (!ok || len(e.I64) != 1) {
			err = fmt.Errorf("optim: scheduler state: %q missing or not one int64", prefix+k)
			return 0
		}
		return e.I64[0]
	}
	getf := func(k string) float64 {
		e, ok := idx[prefix+k]
		if err == nil && (!ok || len(e.F64) != 1) {
			err = fmt.Errorf("optim: scheduler state: %q missing or not one float64", prefix+k)
			return 0
		}
		if err != nil {
			return 0
		}
		return e.F64[0]
	}
	le, sc, b, l := geti("last_epoch"), geti("step_count"), getf("base_lr"), getf("last_lr")
	if err != nil {
		return err
	}
	s.lastEpoch, s.stepCount, s.baseLR, s.lastLR = le, sc, b, l
	return nil
}

func indexByName(entries []nn.StateEntry) map[string]nn.StateEntry {
	m := make(map[string]nn.StateEntry, len(entries))
	for _, e := range entries {
		m[e.Name] = e
	}
	return m
}

// StepLR is torch.optim.lr_scheduler.StepLR: multiply the rate by gamma every stepSize steps.
type StepLR struct{ sched }

// NewStepLR attaches a StepLR to opt (PyTorch's default gamma is 0.1).
func NewStepLR(opt LRTarget, stepSize int, gamma float64) (*StepLR, error) {
	if stepSize <= 0 {
		return nil, fmt.Errorf("%w: StepLR step size %d <= 0", ErrBadHyperparameter, stepSize)
	}
	ss := int64(stepSize)
	return &StepLR{newSched(opt,
		func(s *sched) float64 {
			if s.lastEpoch == 0 || s.lastEpoch%ss != 0 {
				return s.opt.LR()
			}
			return s.opt.LR() * gamma
		},
		func(s *sched) float64 { return s.baseLR * math.Pow(gamma, float64(s.lastEpoch/ss)) },
	)}, nil
}

// MultiStepLR is torch.optim.lr_scheduler.MultiStepLR: multiply the rate by gamma at each
// milestone (a milestone listed twice multiplies by gamma²).
type MultiStepLR struct{ sched }

// NewMultiStepLR attaches a MultiStepLR to opt.
func NewMultiStepLR(opt LRTarget, milestones []int, gamma float64) (*MultiStepLR, error) {
	ms := slices.Clone(milestones)
	sort.Ints(ms)
	count := map[int64]int{}
	for _, m := range ms {
		count[int64(m)]++
	}
	return &MultiStepLR{newSched(opt,
		func(s *sched) float64 {
			n, ok := count[s.lastEpoch]
			if !ok {
				return s.opt.LR()
			}
			return s.opt.LR() * math.Pow(gamma, float64(n))
		},
		func(s *sched) float64 {
			return s.baseLR * math.Pow(gamma, float64(sort.SearchInts(ms, int(s.lastEpoch)+1)))
		},
	)}, nil
}

// CosineAnnealingLR is torch.optim.lr_scheduler.CosineAnnealingLR (the recursive form,
// which equals eta_min + (base-eta_min)(1+cos(pi t/T_max))/2 when nothing else changes the
// rate).
type CosineAnnealingLR struct{ sched }

// NewCosineAnnealingLR attaches a CosineAnnealingLR with period tMax and floor etaMin.
func NewCosineAnnealingLR(opt LRTarget, tMax int, etaMin float64) (*CosineAnnealingLR, error) {
	if tMax <= 0 {
		return nil, fmt.Errorf("%w: CosineAnnealingLR T_max %d <= 0", ErrBadHyperparameter, tMax)
	}
	T := float64(tMax)
	return &CosineAnnealingLR{newSched(opt,
		func(s *sched) float64 {
			e := float64(s.lastEpoch)
			switch {
			case s.lastEpoch == 0:
				return s.opt.LR()
			case s.stepCount == 1 && s.lastEpoch > 0:
				return etaMin + (s.baseLR-etaMin)*(1+math.Cos(e*math.Pi/T))/2
			case pymod(s.lastEpoch-1-int64(tMax), 2*int64(tMax)) == 0:
				return s.opt.LR() + (s.baseLR-etaMin)*(1-math.Cos(math.Pi/T))/2
			}
			return (1+math.Cos(math.Pi*e/T))/(1+math.Cos(math.Pi*(e-1)/T))*(s.opt.LR()-etaMin) + etaMin
		},
		func(s *sched) float64 {
			return etaMin + (s.baseLR-etaMin)*(1+math.Cos(math.Pi*float64(s.lastEpoch)/T))/2
		},
	)}, nil
}

// pymod is Python's %, which is never negative for a positive divisor.
func pymod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// LinearLR is torch.optim.lr_scheduler.LinearLR: scale the rate by a factor going linearly
// from startFactor to endFactor over totalIters steps (PyTorch defaults 1/3, 1, 5): warmup.
type LinearLR struct{ sched }

// NewLinearLR attaches a LinearLR to opt.
func NewLinearLR(opt LRTarget, startFactor, endFactor float64, totalIters int) (*LinearLR, error) {
	if startFactor <= 0 || startFactor > 1 || endFactor < 0 || endFactor > 1 || totalIters <= 0 {
		return nil, fmt.Errorf("%w: LinearLR factors %g, %g (want in (0,1] and [0,1]), total iters %d",
			ErrBadHyperparameter, startFactor, endFactor, totalIters)
	}
	n := float64(totalIters)
	return &LinearLR{newSched(opt,
		func(s *sched) float64 {
			e := float64(s.lastEpoch)
			switch {
			case s.lastEpoch == 0:
				return s.opt.LR() * startFactor
			case s.lastEpoch > int64(totalIters):
				return s.opt.LR()
			}
			return s.opt.LR() * (1 + (endFactor-startFactor)/(n*startFactor+(e-1)*(endFactor-startFactor)))
		},
		func(s *sched) float64 {
			return s.baseLR * (startFactor + (endFactor-startFactor)*min(n, float64(s.lastEpoch))/n)
		},
	)}, nil
}

// SequentialLR is torch.optim.lr_scheduler.SequentialLR: schedulers[i] runs from
// milestones[i-1] on, restarted at its epoch 0 when it takes over.
type SequentialLR struct {
	opt        LRTarget
	scheds     []*sched
	milestones []int64
	lastEpoch  int64
	lastLR     float64
}

// SequentialLR accepts the schedulers of this package.
type schedHolder interface{ inner() *sched }

func (s *sched) inner() *sched { return s }

// NewSequentialLR chains schedulers (all attached to opt, in the order constructed) at the
// given milestones (one fewer than schedulers), e.g. LinearLR warmup then cosine.
func NewSequentialLR(opt LRTarget, schedulers []Scheduler, milestones []int) (*SequentialLR, error) {
	if len(schedulers) == 0 || len(milestones) != len(schedulers)-1 {
		return nil, fmt.Errorf("%w: SequentialLR needs one milestone fewer than schedulers, got %d and %d",
			ErrBadHyperparameter, len(milestones), len(schedulers))
	}
	q := &SequentialLR{opt: opt}
	for i, s := range schedulers {
		h, ok := s.(schedHolder)
		if !ok || h.inner().opt != opt {
			return nil, fmt.Errorf("%w: SequentialLR scheduler %d is not an optim scheduler of this optimizer", ErrBadHyperparameter, i)
		}
		q.scheds = append(q.scheds, h.inner())
	}
	for _, m := range milestones {
		q.milestones = append(q.milestones, int64(m))
	}
	if il, ok := opt.(initialLRer); ok {
		opt.SetLR(il.initialLRValue())
	}
	for _, s := range q.scheds {
		s.lastEpoch--
	}
	q.scheds[0].initialStep()
	q.lastLR = q.scheds[0].lastLR
	return q, nil
}

// Step advances to the next epoch, switching scheduler at milestones.
func (q *SequentialLR) Step() {
	q.lastEpoch++
	i := sort.Search(len(q.milestones), func(i int) bool { return q.milestones[i] > q.lastEpoch })
	s := q.scheds[i]
	if i > 0 && q.milestones[i-1] == q.lastEpoch {
		s.stepTo(0)
	} else {
		s.Step()
	}
	q.lastLR = s.lastLR
}

// LR is the learning rate the last Step set.
func (q *SequentialLR) LR() float64 { return q.lastLR }

// StateDict returns "sched.last_epoch", "sched.last_lr" and each scheduler's state under
// "sched.<i>.".
func (q *SequentialLR) StateDict() []nn.StateEntry {
	out := []nn.StateEntry{
		{Name: SchedPrefix + "last_epoch", Shape: []int{}, I64: []int64{q.lastEpoch}},
		{Name: SchedPrefix + "last_lr", Shape: []int{}, F64: []float64{q.lastLR}},
	}
	for i, s := range q.scheds {
		out = append(out, s.state(SchedPrefix+strconv.Itoa(i)+".")...)
	}
	return out
}

// LoadStateDict restores a position saved by StateDict.
func (q *SequentialLR) LoadStateDict(entries []nn.StateEntry) error {
	idx := indexByName(entries)
	le, ok1 := idx[SchedPrefix+"last_epoch"]
	ll, ok2 := idx[SchedPrefix+"last_lr"]
	if !ok1 || !ok2 || len(le.I64) != 1 || len(ll.F64) != 1 {
		return fmt.Errorf("optim: SequentialLR state: %slast_epoch or %slast_lr missing", SchedPrefix, SchedPrefix)
	}
	for i, s := range q.scheds {
		if err := s.load(SchedPrefix+strconv.Itoa(i)+".", idx); err != nil {
			return err
		}
	}
	q.lastEpoch, q.lastLR = le.I64[0], ll.F64[0]
	return nil
}

// ChainedScheduler is torch.optim.lr_scheduler.ChainedScheduler: every Step steps all its
// schedulers, in order, so their (chainable) factors multiply.
type ChainedScheduler struct {
	scheds []Scheduler
	opt    LRTarget
	lastLR float64
}

// NewChainedScheduler chains schedulers attached to the same optimizer opt.
func NewChainedScheduler(opt LRTarget, schedulers ...Scheduler) (*ChainedScheduler, error) {
	if len(schedulers) == 0 {
		return nil, fmt.Errorf("%w: ChainedScheduler needs at least one scheduler", ErrBadHyperparameter)
	}
	return &ChainedScheduler{scheds: schedulers, opt: opt, lastLR: opt.LR()}, nil
}

// Step steps every scheduler.
func (c *ChainedScheduler) Step() {
	for _, s := range c.scheds {
		s.Step()
	}
	c.lastLR = c.opt.LR()
}

// LR is the learning rate after the last Step.
func (c *ChainedScheduler) LR() float64 { return c.lastLR }

// StateDict returns each scheduler's state under "sched.<i>." plus "sched.last_lr".
func (c *ChainedScheduler) StateDict() []nn.StateEntry {
	out := []nn.StateEntry{{Name: SchedPrefix + "last_lr", Shape: []int{}, F64: []float64{c.lastLR}}}
	for i, s := range c.scheds {
		p := SchedPrefix + strconv.Itoa(i) + "."
		for _, e := range s.StateDict() {
			e.Name = p + e.Name[len(SchedPrefix):]
			out = append(out, e)
		}
	}
	return out
}

// LoadStateDict restores a position saved by StateDict.
func (c *ChainedScheduler) LoadStateDict(entries []nn.StateEntry) error {
	for i, s := range c.scheds {
		p := SchedPrefix + strconv.Itoa(i) + "."
		var sub []nn.StateEntry
		for _, e := range entries {
			if len(e.Name) > len(p) && e.Name[:len(p)] == p {
				e.Name = SchedPrefix + e.Name[len(p):]
				sub = append(sub, e)
			}
		}
		if err := s.LoadStateDict(sub); err != nil {
			return fmt.Errorf("optim: ChainedScheduler scheduler %d: %w", i, err)
		}
	}
	if e, ok := indexByName(entries)[SchedPrefix+"last_lr"]; ok && len(e.F64) == 1 {
		c.lastLR = e.F64[0]
	}
	return nil
}
