package optim

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
