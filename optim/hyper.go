package optim

import "math"

// Hyper are the hyperparameters an optimizer was made with, other than the learning rate
// (LR) and the segments' weight decay: what a copy of its update elsewhere (cuda/tape's
// device optimizer) needs to compute the same numbers. Fields that do not apply to the
// optimizer (betas for SGD) hold the defaults.
type Hyper struct {
	// Momentum, Dampening and Nesterov are SGD's.
	Momentum, Dampening float64
	Nesterov            bool
	// Beta1, Beta2, Eps and AMSGrad are Adam's and AdamW's.
	Beta1, Beta2, Eps float64
	AMSGrad           bool
	// Maximize ascends the objective.
	Maximize bool
}

// Hyper returns the optimizer's hyperparameters.
func (b *base) Hyper() Hyper {
	c := b.cfg
	return Hyper{Momentum: c.momentum, Dampening: c.dampening, Nesterov: c.nesterov,
		Beta1: c.beta1, Beta2: c.beta2, Eps: c.eps, AMSGrad: c.amsgrad, Maximize: c.maximize}
}

// Decoupled reports whether the optimizer is AdamW (decay applied to the parameters)
// rather than Adam (decay added to the gradient).
func (o *Adam) Decoupled() bool { return o.decoupled }

// AdamScalars are the float32 scalars of one Adam or AdamW step, shared by every element: the
// step-dependent terms computed in float64 and then rounded. Adam's update and every copy of
// it elsewhere (a device kernel's arguments) take them from here.
type AdamScalars struct {
	// B1, OneMinusB1, B2, OneMinusB2: the betas and their complements.
	B1, OneMinusB1, B2, OneMinusB2 float32
	// BC2Sqrt is sqrt(1 - beta2^t); Eps the denominator term; NegStep -lr/(1 - beta1^t).
	BC2Sqrt, Eps, NegStep float32
}

// AdamStep returns the scalars of step t (counted from 1) at learning rate lr.
func (h Hyper) AdamStep(lr float64, t int64) AdamScalars {
	bc1 := 1 - math.Pow(h.Beta1, float64(t))
	bc2 := 1 - math.Pow(h.Beta2, float64(t))
	return AdamScalars{
		B1: float32(h.Beta1), OneMinusB1: float32(1 - h.Beta1),
		B2: float32(h.Beta2), OneMinusB2: float32(1 - h.Beta2),
		BC2Sqrt: float32(math.Sqrt(bc2)), Eps: float32(h.Eps),
		NegStep: float32(-(lr / bc1)),
	}
}
