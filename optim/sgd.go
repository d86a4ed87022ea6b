package optim

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/nn"
)

// SGD is torch.optim.SGD (PyTorch 1.13, single-tensor path): for each element,
//
//	d = grad + weight_decay*param
//	buf = d (first step)  or  buf = momentum*buf + (1-dampening)*d
//	d = d + momentum*buf (nesterov)  or  d = buf
//	param = param - lr*d
//
// computed in float32 with the hyperparameters rounded to float32, as PyTorch does.
type SGD struct {
	base
	mom     [][]float32 // momentum_buffer per segment (nil without momentum)
	momInit []bool      // whether the buffer holds a value (PyTorch: key present)
	first   []bool      // per segment, during a step: its buffer starts this step
}

// NewSGD returns an SGD optimizer over segs with learning rate lr.
func NewSGD(segs []Segment, lr float64, opts ...Option) (*SGD, error) {
	b, err := newBase(segs, lr, opts)
	if err != nil {
		return nil, fmt.Errorf("optim: SGD: %w", err)
	}
	c := b.cfg
	switch {
	case c.momentum < 0:
		return nil, fmt.Errorf("%w: SGD momentum %g < 0", ErrBadHyperparameter, c.momentum)
	case c.nesterov && (c.momentum <= 0 || c.dampening != 0):
		return nil, fmt.Errorf("%w: SGD nesterov needs momentum > 0 and dampening 0", ErrBadHyperparameter)
	}
	o := &SGD{base: b, momInit: make([]bool, len(segs))}
	if c.momentum != 0 {
		if o.mom, err = o.allocState(kindMomentum); err != nil {
			return nil, fmt.Errorf("optim: SGD: %w", err)
		}
	}
	return o, nil
}

// Step applies one SGD update to every segment.
func (o *SGD) Step() error { return o.stepWhole(o, o.update) }

// BeginStep starts a step applied in pieces by StepGrads (see Ranged).
func (o *SGD) BeginStep() error {
	if err := o.begin("SGD"); err != nil {
		return err
	}
	if o.mom != nil {
		if o.first == nil {
			o.first = make([]bool, len(o.segs))
		}
		for si := range o.segs {
			o.first[si] = !o.momInit[si]
		}
	}
	return nil
}

// StepGrads updates the elements whose gradients lie in grad (see Ranged).
func (o *SGD) StepGrads(grad []float32) error { return o.stepGrads("SGD", grad, o.update) }

// EndStep ends a step started by BeginStep.
func (o *SGD) EndStep() error {
	if err := o.within("SGD", "EndStep"); err != nil {
		return err
	}
	o.inStep = false
	for si := range o.momInit {
		o.momInit[si] = true
	}
	o.step++
	return nil
}

// update applies this step's update to elements [lo, hi) of segment si. Workers call it
// concurrently on disjoint ranges.
func (o *SGD) update(si, lo, hi int) {
	c := o.cfg
	negLR := float32(-o.lr)
	mom := float32(c.momentum)
	damp := float32(1 - c.dampening)
	s := o.segs[si]
	wd := float32(s.WeightDecay)
	p, g := s.Data[lo:hi], s.Grad[lo:hi]
	var buf []float32
	first := false
	if o.mom != nil {
		buf = o.mom[si][lo:hi]
		first = o.first[si]
	}
	if buf != nil && !first && !c.nesterov && !c.maximize {
		sgdMomentum(p, g, buf, negLR, mom, damp, wd)
		return
	}
	for i := range p {
		d := g[i]
		if c.maximize {
			d = -d
		}
		if wd != 0 {
			d += wd * p[i]
		}
		if buf != nil {
			if first {
				buf[i] = d
			} else {
				buf[i] = buf[i]*mom + damp*d
			}
			if c.nesterov {
				d += mom * buf[i]
			} else {
				d = buf[i]
			}
		}
		p[i] += negLR * d
	}
}

// StateDict returns "optim.step", "optim.lr", "optim.initial_lr" and, once set, every
// parameter's "optim.<param>.momentum_buffer".
func (o *SGD) StateDict() []nn.StateEntry {
	out := o.scalars()
	for si := range o.segs {
		if o.mom != nil && o.momInit[si] {
			out = o.appendState(out, si, kindMomentum, o.mom[si])
		}
	}
	return out
}

// LoadStateDict restores the step, learning rate and momentum buffers. A segment whose
// buffers are all absent starts afresh (PyTorch's first-step initialisation); one whose
// buffers are only partly present is an error.
func (o *SGD) LoadStateDict(entries []nn.StateEntry) error {
	idx := NewSlices(entries)
	if err := o.loadScalars(idx); err != nil {
		return err
	}
	for si := range o.segs {
		if o.mom == nil {
			continue
		}
		found, err := o.loadState(idx, si, kindMomentum, o.mom[si], true)
		if err != nil {
			return err
		}
		o.momInit[si] = found
	}
	return nil
}

// sgdMomentum is Step's loop for the common case (momentum after the first step, no
// Nesterov, not maximising), without the per-element branches and bounds checks: the same
// operations in the same order, so the same bits.
func sgdMomentum(p, g, buf []float32, negLR, mom, damp, wd float32) {
	g, buf = g[:len(p)], buf[:len(p)]
	if wd == 0 && damp == 1 {
		// buf·mom + 1·d and p + (−lr)·b are mom·buf + d and p − lr·b exactly: the
		// vectorised kernel computes the same bits.
		simd.SGDMomentum(p, g, buf, -negLR, mom)
		return
	}
	if wd == 0 {
		for i, d := range g {
			b := buf[i]*mom + damp*d
			buf[i] = b
			p[i] += negLR * b
		}
		return
	}
	for i, d := range g {
		d += wd * p[i]
		b := buf[i]*mom + damp*d
		buf[i] = b
		p[i] += negLR * b
	}
}
