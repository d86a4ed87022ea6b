package optim

import (
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/nn"
)

// Adam is torch.optim.Adam, or torch.optim.AdamW when decoupled (PyTorch 1.13,
// single-tensor path). For each element, at step t (counted from 1):
//
//	param = param*(1 - lr*weight_decay)            (AdamW)
//	g = grad + weight_decay*param                  (Adam)
//	m = beta1*m + (1-beta1)*g
//	v = beta2*v + (1-beta2)*g*g
//	vmax = max(vmax, v); v̂ = vmax (amsgrad)  or  v̂ = v
//	denom = sqrt(v̂)/sqrt(1-beta2^t) + eps
//	param = param + (-lr/(1-beta1^t))*m/denom
//
// in float32, with the step-dependent scalars computed in float64 and then rounded, as
// PyTorch does.
type Adam struct {
	base
	decoupled bool
	expAvg    [][]float32
	expAvgSq  [][]float32
	maxSq     [][]float32 // amsgrad only
	k         adamConsts  // this step's scalars (set by BeginStep)
}

// NewAdam returns torch.optim.Adam over segs: weight decay (Segment.WeightDecay) is an L2
// term added to the gradient. Its moments come from the allocator (WithAllocator), one
// buffer per kind over every segment.
func NewAdam(segs []Segment, lr float64, opts ...Option) (*Adam, error) {
	return newAdam("Adam", false, segs, lr, opts)
}

// NewAdamW returns torch.optim.AdamW over segs: weight decay (Segment.WeightDecay; PyTorch's
// default is 1e-2) shrinks the parameters directly. Segments decides which parameters decay.
func NewAdamW(segs []Segment, lr float64, opts ...Option) (*Adam, error) {
	return newAdam("AdamW", true, segs, lr, opts)
}

func newAdam(name string, decoupled bool, segs []Segment, lr float64, opts []Option) (*Adam, error) {
	b, err := newBase(segs, lr, opts)
	if err != nil {
		return nil, fmt.Errorf("optim: %s: %w", name, err)
	}
	c := b.cfg
	if c.beta1 < 0 || c.beta1 >= 1 || c.beta2 < 0 || c.beta2 >= 1 || c.eps < 0 {
		return nil, fmt.Errorf("%w: %s betas (%g, %g), eps %g", ErrBadHyperparameter, name, c.beta1, c.beta2, c.eps)
	}
	o := &Adam{base: b, decoupled: decoupled}
	if o.expAvg, err = o.allocState(kindExpAvg); err != nil {
		return nil, fmt.Errorf("optim: %s: %w", name, err)
	}
	if o.expAvgSq, err = o.allocState(kindExpAvgSq); err != nil {
		return nil, fmt.Errorf("optim: %s: %w", name, err)
	}
	if c.amsgrad {
		if o.maxSq, err = o.allocState(kindMaxExpAvgSq); err != nil {
			return nil, fmt.Errorf("optim: %s: %w", name, err)
		}
	}
	return o, nil
}

// adamConsts are the float32 scalars of one step, shared by every element and worker.
type adamConsts struct {
	AdamScalars
	decay, wd float32
}

// Step applies one Adam/AdamW update to every segment.
func (o *Adam) Step() error { return o.stepWhole(o, o.update) }

// BeginStep starts a step applied in pieces by StepGrads (see Ranged): it counts the step
// and computes its scalars.
func (o *Adam) BeginStep() error {
	if err := o.begin(o.name()); err != nil {
		return err
	}
	o.step++
	o.k = adamConsts{AdamScalars: o.Hyper().AdamStep(o.lr, o.step)}
	return nil
}

// StepGrads updates the elements whose gradients lie in grad (see Ranged).
func (o *Adam) StepGrads(grad []float32) error { return o.stepGrads(o.name(), grad, o.update) }

// EndStep ends a step started by BeginStep.
func (o *Adam) EndStep() error {
	if err := o.within(o.name(), "EndStep"); err != nil {
		return err
	}
	o.inStep = false
	return nil
}

func (o *Adam) name() string {
	if o.decoupled {
		return "AdamW"
	}
	return "Adam"
}

// update applies this step's update to elements [lo, hi) of segment si. Workers call it
// concurrently on disjoint ranges.
func (o *Adam) update(si, lo, hi int) {
	s := o.segs[si]
	k := o.k
	k.decay, k.wd = 1, 0
	if o.decoupled {
		k.decay = float32(1 - o.lr*s.WeightDecay)
	} else {
		k.wd = float32(s.WeightDecay)
	}
	var vmax []float32
	if o.maxSq != nil {
		vmax = o.maxSq[si][lo:hi]
	}
	adamKernel(&k, o.cfg.maximize, o.decoupled, s.Data[lo:hi], s.Grad[lo:hi], o.expAvg[si][lo:hi], o.expAvgSq[si][lo:hi], vmax)
}

// adamKernel updates one chunk. All slices have the same length; vmax is nil without amsgrad.
func adamKernel(k *adamConsts, maximize, decoupled bool, p, g, m, v, vmax []float32) {
	for i := range p {
		gi := g[i]
		if maximize {
			gi = -gi
		}
		pi := p[i]
		if decoupled {
			pi *= k.decay
		} else if k.wd != 0 {
			gi += k.wd * pi
		}
		mi := m[i]*k.B1 + k.OneMinusB1*gi
		vi := v[i]*k.B2 + k.OneMinusB2*gi*gi
		m[i], v[i] = mi, vi
		if vmax != nil {
			vi = max(vmax[i], vi)
			vmax[i] = vi
		}
		denom := float32(math.Sqrt(float64(vi)))/k.BC2Sqrt + k.Eps
		p[i] = pi + k.NegStep*mi/denom
	}
}

// StateDict returns "optim.step", "optim.lr", "optim.initial_lr" and every parameter's
// "optim.<param>.exp_avg", "optim.<param>.exp_avg_sq" (and "max_exp_avg_sq" with amsgrad).
func (o *Adam) StateDict() []nn.StateEntry {
	out := o.scalars()
	for si := range o.segs {
		out = o.appendState(out, si, kindExpAvg, o.expAvg[si])
		out = o.appendState(out, si, kindExpAvgSq, o.expAvgSq[si])
		if o.maxSq != nil {
			out = o.appendState(out, si, kindMaxExpAvgSq, o.maxSq[si])
		}
	}
	return out
}

// LoadStateDict restores the step, learning rate and moments. Every moment this optimizer
// needs must be present unless the saved step is 0.
func (o *Adam) LoadStateDict(entries []nn.StateEntry) error {
	idx := NewSlices(entries)
	if err := o.loadScalars(idx); err != nil {
		return err
	}
	optional := o.step == 0
	for si := range o.segs {
		kinds := []string{kindExpAvg, kindExpAvgSq}
		bufs := [][]float32{o.expAvg[si], o.expAvgSq[si]}
		if o.maxSq != nil {
			kinds, bufs = append(kinds, kindMaxExpAvgSq), append(bufs, o.maxSq[si])
		}
		for j, kind := range kinds {
			found, err := o.loadState(idx, si, kind, bufs[j], optional)
			if err != nil {
				return err
			}
			if !found {
				clear(bufs[j])
			}
		}
	}
	return nil
}
