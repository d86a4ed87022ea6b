package optim

import (
	"errors"
	"fmt"
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

// WithWorkers lets Step split segments of at least minChunk elements per worker across n
// goroutines (n <= 0 means GOMAXPROCS). Every element is updated by the same code with the
// same constants, so the result is bit-identical to the serial path (n = 1, the default).
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
}

func newBase(segs []Segment, lr float64, opts []Option) (base, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkSegments(segs); err != nil {
		return base{}, err
	}
	if lr < 0 {
		return base{}, fmt.Errorf("%w: learning rate %g < 0", ErrBadHyperparameter, lr)
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

// parallel runs kernel(lo, hi) over [0, n), split across the configured workers when n is
// large enough (with ops.ForkJoin, so on the kernels' worker pool when it is free). Chunks
// are disjoint, so the result does not depend on the split.
func (b *base) parallel(n int, kernel func(lo, hi int)) {
	w := min(b.cfg.workers, n/b.cfg.minChunk)
	if w <= 1 {
		kernel(0, n)
		return
	}
	chunk := (n + w - 1) / w
	ops.ForkJoin(w, func(i int) {
		if lo := i * chunk; lo < n {
			kernel(lo, min(lo+chunk, n))
		}
	})
}
