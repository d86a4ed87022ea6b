package optim

import (
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
)

// Optimizer updates its segments' Data from their Grad.
type Optimizer interface {
	// Step applies one update to every segment.
	Step() error
	// ZeroGrad sets the gradients of every segment to zero.
	ZeroGrad()
	// LR is the current learning rate.
	LR() float64
	// SetLR changes the learning rate (schedulers call it).
	SetLR(lr float64)
	// StateDict returns the optimizer state keyed "optim.<param>.<kind>" plus "optim.step",
	// "optim.lr" and "optim.initial_lr". The entries alias the optimizer's memory.
	StateDict() []nn.StateEntry
	// LoadStateDict restores state saved by any segmentation of the same parameters.
	LoadStateDict(entries []nn.StateEntry) error
}

// ErrBadHyperparameter is returned for a learning rate, momentum, beta or eps out of range.
var ErrBadHyperparameter = errors.New("optim: bad hyperparameter")

// Option configures an optimizer. Options that do not apply to an optimizer (betas for SGD)
// are ignored by it.
type Option func(*config)

type config struct {
	momentum, dampening float64
	nesterov, maximize  bool
	beta1, beta2, eps   float64
	amsgrad             bool
	workers             int
	minChunk            int
	alloc               Allocator
}

func defaults() config {
	return config{beta1: 0.9, beta2: 0.999, eps: 1e-8, workers: 1, minChunk: 1 << 16}
}

// WithMomentum sets SGD's momentum factor (PyTorch default 0).
func WithMomentum(m float64) Option { return func(c *config) { c.momentum = m } }

// WithDampening sets SGD's dampening for momentum (PyTorch default 0).
func WithDampening(d float64) Option { return func(c *config) { c.dampening = d } }

// WithNesterov enables Nesterov momentum for SGD (needs momentum > 0 and dampening 0).
func WithNesterov() Option { return func(c *config) { c.nesterov = true } }

// WithMaximize makes the optimizer ascend the objective instead of descending it.
func WithMaximize() Option { return func(c *config) { c.maximize = true } }

// WithBetas sets Adam's running-average coefficients (PyTorch default 0.9, 0.999).
func WithBetas(beta1, beta2 float64) Option {
	return func(c *config) { c.beta1, c.beta2 = beta1, beta2 }
}

// WithEps sets Adam's denominator term (PyTorch default 1e-8).
func WithEps(eps float64) Option { return func(c *config) { c.eps = eps } }

// WithAMSGrad enables the AMSGrad variant of Adam and AdamW.
func WithAMSGrad() Option { return func(c *config) { c.amsgrad = true } }

// WithWorkers lets Step (and StepGrads) split the update across n goroutines (n <= 0 means
// GOMAXPROCS), each taking at least minChunk elements: the elements of all segments are cut
// into pieces of about equal size, a piece spanning segment boundaries where it must, so
// many small segments (a ZeRO shard) spread as well as one large one. Every element is
// updated by the same code with the same constants, so the result is bit-identical to the
// serial path (n = 1, the default) for every n and minChunk.
func WithWorkers(n, minChunk int) Option {
	return func(c *config) {
		if n <= 0 {
			n = runtime.GOMAXPROCS(0)
		}
		c.workers, c.minChunk = n, max(minChunk, 1)
	}
}

// base holds what every optimizer shares: segments, learning rate and step count.
type base struct {
	segs      []Segment
	lr        float64
	initialLR float64
	hasInit   bool
	step      int64
	cfg       config
	inStep    bool // between BeginStep and EndStep of a ranged step

	stateElems int64     // float32 state elements allocated (StateBytes)
	wholePlan  [][]chunk // the split of every segment across workers (Step), made once
}

func newBase(segs []Segment, lr float64, opts []Option) (base, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkSegments(segs); err != nil {
		return base{}, err
	}
	if !(lr >= 0) || math.IsInf(lr, 0) {
		return base{}, fmt.Errorf("%w: learning rate %g: want a finite number >= 0 (as torch.optim refuses a negative lr)", ErrBadHyperparameter, lr)
	}
	for i, s := range segs {
		if wd := s.WeightDecay; !(wd >= 0) || math.IsInf(wd, 0) {
			return base{}, fmt.Errorf("%w: segment %d %q: weight decay %g: want a finite number >= 0", ErrBadHyperparameter, i, s.Name, wd)
		}
	}
	return base{segs: segs, lr: lr, cfg: cfg}, nil
}

// LR is the current learning rate.
func (b *base) LR() float64 { return b.lr }

// SetLR changes the learning rate.
func (b *base) SetLR(lr float64) { b.lr = lr }

// Steps is the number of updates applied so far ("optim.step").
func (b *base) Steps() int64 { return b.step }

// Segments returns the segments the optimizer updates.
func (b *base) Segments() []Segment { return b.segs }

// ZeroGrad sets the gradients of every segment to zero.
func (b *base) ZeroGrad() {
	for _, s := range b.segs {
		clear(s.Grad)
	}
}

// initialLRValue implements the scheduler contract of PyTorch's param_group['initial_lr']:
// the first scheduler attached records the learning rate, later ones reuse it.
func (b *base) initialLRValue() float64 {
	if !b.hasInit {
		b.initialLR, b.hasInit = b.lr, true
	}
	return b.initialLR
}

// chunk is elements [lo, hi) of segment seg.
type chunk struct{ seg, lo, hi int }

// run calls kernel(seg, lo, hi) over every element of plan's chunks, one goroutine per
// list (with ops.ForkJoin, so on the kernels' worker pool when it is free). Chunks are
// disjoint, so the result does not depend on the split.
func run(plan [][]chunk, kernel func(si, lo, hi int)) {
	each := func(i int) {
		for _, c := range plan[i] {
			kernel(c.seg, c.lo, c.hi)
		}
	}
	if len(plan) == 1 {
		each(0)
		return
	}
	ops.ForkJoin(len(plan), each)
}

// split cuts chunks (in order) into at most workers lists of about equal element count,
// each of at least minChunk elements: one list when the total is under 2·minChunk. A chunk
// is cut where a list fills up, so lists may end and start inside a segment.
func split(chunks []chunk, workers, minChunk int) [][]chunk {
	total := 0
	for _, c := range chunks {
		total += c.hi - c.lo
	}
	w := min(workers, total/minChunk)
	if w <= 1 {
		return [][]chunk{chunks}
	}
	per := (total + w - 1) / w
	plan := make([][]chunk, w)
	k, filled := 0, 0
	for _, c := range chunks {
		for lo := c.lo; lo < c.hi; {
			take := min(c.hi-lo, max(per-filled, 1))
			plan[k] = append(plan[k], chunk{c.seg, lo, lo + take})
			lo += take
			if filled += take; filled >= per && k < w-1 {
				k, filled = k+1, 0
			}
		}
	}
	return plan[:k+1]
}
