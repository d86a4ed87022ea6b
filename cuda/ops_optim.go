package cuda

import (
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/optim"
)

// Optimizer updates on the device: the element loops of package optim's SGD and Adam/AdamW,
// so that a device step equals the CPU's (cuda/tape's device optimizer drives them per
// segment and per DDP bucket). Every tensor is float32 with the same number of elements;
// p and the state tensors are updated in place.

// SGDArgs are one SGD step's float32 scalars and switches, as optim.SGD computes them.
type SGDArgs struct {
	// NegLR is -lr; Momentum, Damp (1 - dampening) and WeightDecay as torch.optim.SGD's.
	NegLR, Momentum, Damp, WeightDecay float32
	// First: the momentum buffer starts this step (buf = d). Nesterov, Maximize as optim's.
	First, Nesterov, Maximize bool
}

// SGD applies one torch.optim.SGD update to p from g: d = g (+ wd·p); with buf (nil
// without momentum) buf = d on the first step, else momentum·buf + damp·d, then d = buf
// or, Nesterov, d + momentum·buf; p += -lr·d.
func (d *Device) SGD(p, g, buf *Tensor, a SGDArgs) error {
	ts := []*Tensor{p, g}
	flags := 0
	bufArg := uint64(0)
	if buf != nil {
		ts = append(ts, buf)
		flags |= 1
		bufArg = ptr(buf)
		if a.First {
			flags |= 2
		}
		if a.Nesterov {
			flags |= 4
		}
	}
	if a.Maximize {
		flags |= 8
	}
	if err := d.check("sgd", Float32, ts...); err != nil {
		return err
	}
	return d.launch("sgd_f32", p.n, ptr(p), ptr(g), bufArg, driver.ArgF32(a.NegLR), driver.ArgF32(a.Momentum),
		driver.ArgF32(a.Damp), driver.ArgF32(a.WeightDecay), driver.ArgI32(flags), driver.ArgI64(int64(p.n)))
}

// AdamArgs are one Adam/AdamW step's float32 scalars, as optim.Adam's BeginStep computes
// them (step-dependent terms in float64, then rounded).
type AdamArgs struct {
	// AdamScalars are the step's scalars, as optim computes them (Hyper.AdamStep).
	optim.AdamScalars
	// Decay is AdamW's 1 - lr·weight_decay; WeightDecay is Adam's L2 term.
	Decay, WeightDecay float32
	// Decoupled selects AdamW's decay; Maximize as optim's.
	Decoupled, Maximize bool
}

// WithWeightDecay is a with weight decay wd at learning rate lr: AdamW's factor Decay =
// 1 - lr·wd when a.Decoupled, else Adam's L2 term WeightDecay = wd (Decay 1).
func (a AdamArgs) WithWeightDecay(lr, wd float64) AdamArgs {
	a.Decay, a.WeightDecay = 1, 0
	if a.Decoupled {
		a.Decay = float32(1 - lr*wd)
	} else {
		a.WeightDecay = float32(wd)
	}
	return a
}

// Adam applies one torch.optim.Adam (or AdamW, a.Decoupled) update to p from g with the
// moments m and v, and with vmax (nil without AMSGrad) the running maximum of v.
func (d *Device) Adam(p, g, m, v, vmax *Tensor, a AdamArgs) error {
	ts := []*Tensor{p, g, m, v}
	flags := 0
	vmaxArg := uint64(0)
	if vmax != nil {
		ts = append(ts, vmax)
		flags |= 4
		vmaxArg = ptr(vmax)
	}
	if a.Decoupled {
		flags |= 1
	}
	if a.Maximize {
		flags |= 2
	}
	if err := d.check("adam", Float32, ts...); err != nil {
		return err
	}
	f := driver.ArgF32
	return d.launch("adam_f32", p.n, ptr(p), ptr(g), ptr(m), ptr(v), vmaxArg, f(a.Decay), f(a.WeightDecay), f(a.B1), f(a.OneMinusB1),
		f(a.B2), f(a.OneMinusB2), f(a.BC2Sqrt), f(a.Eps), f(a.NegStep), driver.ArgI32(flags), driver.ArgI64(int64(p.n)))
}

// Zero sets y's bytes to zero in stream order (gradient buffers between steps).
func (d *Device) Zero(y *Tensor) error {
	if y == nil || y.d != d {
		return d.check("zero", Float32, y)
	}
	if y.n == 0 {
		return nil
	}
	if y.dtype.Size() != 4 {
		return d.check("zero", Float32, y)
	}
	return d.ctx.MemsetD32Async(y.Ptr(), 0, y.n, d.stream)
}
