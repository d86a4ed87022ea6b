package tape

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// Flat is the update of an optim.SGD or optim.Adam/AdamW over flat device buffers: its
// state (momentum, or the moments) as device buffers of n elements, ranges [lo, hi) of one
// weight decay each, and each step's scalars computed as optim computes them for the host
// optimizer's learning rate and hyperparameters. The device state's optimizer is one, and
// cuda/devzero steps a rank's shard with another. Begin, then StepRange over disjoint
// pieces that together cover the ranges, then End, is one step; the caller orders them.
type Flat struct {
	dev    *cuda.Device
	host   optim.Optimizer
	adam   bool
	decpl  bool // AdamW
	hyper  optim.Hyper
	ranges []flatRange
	state  []*cuda.Tensor // SGD: [momentum] (none without momentum); Adam: [exp_avg, exp_avg_sq (, max_exp_avg_sq)]
	kinds  []string       // the state-dict kind of each state buffer
	in     bool           // between Begin and End
	lr     float64        // this step's learning rate
	adamK  cuda.AdamArgs  // this step's Adam scalars (WeightDecay, Decay per range)
}

// flatRange is elements [lo, hi) of the buffers, of one weight decay.
type flatRange struct {
	lo, hi int
	wd     float64
	init   bool // SGD: the momentum buffer holds a value
	first  bool // SGD, during a step: the buffer starts this step
}

// NewFlat returns host's update on dev over n elements, with its state buffers allocated
// and zeroed and no range yet (AddRange). host must be an optim.SGD, Adam or AdamW; it stays
// the source of the learning rate and hyperparameters. Free releases the state.
func NewFlat(dev *cuda.Device, host optim.Optimizer, n int) (*Flat, error) {
	f := &Flat{dev: dev, host: host}
	if _, ok := onDevice(host, f); !ok {
		return nil, fmt.Errorf("cuda/tape: the device optimizer copies optim.SGD, Adam or AdamW, not %T", host)
	}
	kernel := "sgd_f32"
	if f.adam {
		kernel = "adam_f32"
	}
	if err := dev.Kernel(kernel); err != nil { // at construction, not at the first step
		return nil, fmt.Errorf("cuda/tape: device optimizer: %w", err)
	}
	for range f.kinds {
		t, err := dev.Alloc(cuda.Float32, n)
		if err == nil {
			err = dev.Zero(t)
		}
		if err != nil {
			f.Free()
			return nil, fmt.Errorf("cuda/tape: optimizer state (%d floats): %w", n, err)
		}
		f.state = append(f.state, t)
	}
	return f, nil
}

// onDevice reports whether the device can step host's kind of optimizer, with its segments,
// and fills f's description of it when f is not nil: the one list of the kinds it steps.
func onDevice(host optim.Optimizer, f *Flat) (segs []optim.Segment, ok bool) {
	switch h := host.(type) {
	case *optim.SGD:
		if f != nil {
			f.hyper = h.Hyper()
			if f.hyper.Momentum != 0 {
				f.kinds = []string{"momentum_buffer"}
			}
		}
		return h.Segments(), true
	case *optim.Adam:
		if f != nil {
			f.hyper, f.adam, f.decpl = h.Hyper(), true, h.Decoupled()
			f.kinds = []string{"exp_avg", "exp_avg_sq"}
			if f.hyper.AMSGrad {
				f.kinds = append(f.kinds, "max_exp_avg_sq")
			}
		}
		return h.Segments(), true
	}
	return nil, false
}

// AddRange adds elements [lo, hi), of weight decay wd, after the ranges so far (merged with
// the last one when they touch and decay alike).
func (f *Flat) AddRange(lo, hi int, wd float64) {
	if n := len(f.ranges); n > 0 && f.ranges[n-1].hi == lo && f.ranges[n-1].wd == wd {
		f.ranges[n-1].hi = hi
		return
	}
	f.ranges = append(f.ranges, flatRange{lo: lo, hi: hi, wd: wd})
}

// State returns the state buffers, one per kind of Kinds.
func (f *Flat) State() []*cuda.Tensor { return f.state }

// Kinds returns the optimizer's state-dict kinds of its state buffers ("exp_avg", ...).
func (f *Flat) Kinds() []string { return f.kinds }

// Begin starts a step at step count steps (Adam's bias correction; the host's count after
// its BeginStep), computing the scalars as optim's BeginStep does. Begin before the
// previous step's End, and StepRange or End outside a step, are errors (optim.ErrStepState).
func (f *Flat) Begin(steps int64) error {
	if f.in {
		return fmt.Errorf("%w: device optimizer: BeginStep before the previous step's EndStep", optim.ErrStepState)
	}
	f.in = true
	f.lr = f.host.LR()
	// A schedule may move the momentum (OneCycleLR) as it moves the rate.
	if h, ok := f.host.(interface{ Hyper() optim.Hyper }); ok {
		f.hyper = h.Hyper()
	}
	if !f.adam {
		for i := range f.ranges {
			f.ranges[i].first = !f.ranges[i].init
		}
		return nil
	}
	f.adamK = cuda.AdamArgs{AdamScalars: f.hyper.AdamStep(f.lr, steps), Decoupled: f.decpl, Maximize: f.hyper.Maximize}
	return nil
}

// StepRange launches, on dev's stream, the update of every range's elements within [lo, hi)
// of data and grad (n elements each, as the state).
func (f *Flat) StepRange(data, grad *cuda.Tensor, lo, hi int) error {
	if !f.in {
		return fmt.Errorf("%w: device optimizer: StepRange without BeginStep", optim.ErrStepState)
	}
	for i := range f.ranges {
		r := &f.ranges[i]
		a, z := max(lo, r.lo), min(hi, r.hi)
		if a >= z {
			continue
		}
		if err := f.update(r, data, grad, a, z); err != nil {
			return fmt.Errorf("cuda/tape: device optimizer on elements [%d,%d): %w", a, z, err)
		}
	}
	return nil
}

// End ends the step (SGD's momentum buffers then hold a value).
func (f *Flat) End() error {
	if !f.in {
		return fmt.Errorf("%w: device optimizer: EndStep without BeginStep", optim.ErrStepState)
	}
	f.in = false
	if !f.adam {
		for i := range f.ranges {
			f.ranges[i].init = true
		}
	}
	return nil
}

// Free releases the state buffers.
func (f *Flat) Free() {
	for _, t := range f.state {
		t.Free()
	}
	f.state = nil
}

func (f *Flat) update(r *flatRange, data, grad *cuda.Tensor, lo, hi int) error {
	n := hi - lo
	views := make([]*cuda.Tensor, 0, 2+len(f.state))
	for _, t := range append([]*cuda.Tensor{data, grad}, f.state...) {
		v, err := t.View(lo, n)
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	h := f.hyper
	if !f.adam {
		var buf *cuda.Tensor
		if len(f.state) > 0 {
			buf = views[2]
		}
		return f.dev.SGD(views[0], views[1], buf, cuda.SGDArgs{
			NegLR: float32(-f.lr), Momentum: float32(h.Momentum), Damp: float32(1 - h.Dampening),
			WeightDecay: float32(r.wd), First: r.first, Nesterov: h.Nesterov, Maximize: h.Maximize,
		})
	}
	k := f.adamK.WithWeightDecay(f.lr, r.wd)
	var vmax *cuda.Tensor
	if len(views) > 4 {
		vmax = views[4]
	}
	return f.dev.Adam(views[0], views[1], views[2], views[3], vmax, k)
}

// deviceOptimizer is the device state's copy of an optim.SGD or optim.Adam/AdamW: a Flat
// over ParamSet.Data's layout, one range per segment, with its own step count and the
// host optimizer's state read and written through its StateDict.
type deviceOptimizer struct {
	*Flat
	ps     *nn.ParamSet
	params [][]*nn.Param // by range: its segment's parameters
	steps  int64         // optim.step
}

func newDeviceOptimizer(dev *cuda.Device, ps *nn.ParamSet, host optim.Optimizer) (*deviceOptimizer, error) {
	o := &deviceOptimizer{ps: ps}
	segs, _ := onDevice(host, nil)
	// One range per segment, never merged: each keeps its parameters and SGD's start.
	ranges := make([]flatRange, 0, len(segs))
	for i, sg := range segs {
		lo, ok := offsetIn(ps.Data, sg.Data)
		if !ok {
			return nil, fmt.Errorf("cuda/tape: optimizer segment %d (%s) does not lie in the model's parameter buffer", i, sg.Name)
		}
		var params []*nn.Param
		for _, pt := range sg.Parts {
			p := ps.Param(pt.Param)
			if p == nil || pt.ParamOffset != 0 || pt.Len != p.Numel() {
				return nil, fmt.Errorf("cuda/tape: optimizer segment %s holds part of a parameter (a shard): not on the device", sg.Name)
			}
			params = append(params, p)
		}
		if len(sg.Parts) == 0 {
			return nil, fmt.Errorf("cuda/tape: optimizer segment %s names no parameters", sg.Name)
		}
		ranges = append(ranges, flatRange{lo: lo, hi: lo + len(sg.Data), wd: sg.WeightDecay})
		o.params = append(o.params, params)
	}
	var err error
	if o.Flat, err = NewFlat(dev, host, len(ps.Data)); err != nil {
		return nil, err
	}
	o.ranges = ranges
	if err := o.fromHost(); err != nil {
		o.Free()
		return nil, err
	}
	return o, nil
}

// offsetIn is the element offset of sub within buf, when sub lies in it.
func offsetIn(buf, sub []float32) (int, bool) {
	if len(sub) == 0 || len(buf) == 0 {
		return 0, len(sub) == 0
	}
	b, s := uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&sub[0]))
	if s < b || (s-b)%4 != 0 {
		return 0, false
	}
	off := int((s - b) / 4)
	return off, off+len(sub) <= len(buf)
}

// begin starts a step as optim's BeginStep does (Adam counts the step here, SGD at end).
func (o *deviceOptimizer) begin() error {
	next := o.steps
	if o.adam {
		next++
	}
	if err := o.Begin(next); err != nil {
		return err
	}
	o.steps = next
	return nil
}

// end ends the step as optim's EndStep does.
func (o *deviceOptimizer) end() error {
	if err := o.End(); err != nil {
		return err
	}
	if !o.adam {
		o.steps++
	}
	return nil
}

// fromHost reads the host optimizer's step count and state (its StateDict) into the device
// buffers; SGD's momentum counts as started for a segment whose every parameter has one.
func (o *deviceOptimizer) fromHost() error {
	entries := o.host.StateDict()
	byName := map[string]nn.StateEntry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	if e, ok := byName[optim.KeyStep]; ok && len(e.I64) == 1 {
		o.steps = e.I64[0]
	}
	host := make([]float32, len(o.ps.Data))
	for k, kind := range o.kinds {
		clear(host)
		for i := range o.ranges {
			found := 0
			for _, p := range o.params[i] {
				e, ok := byName[optim.Prefix+p.Name+"."+kind]
				if !ok {
					continue
				}
				if len(e.F32) != p.Numel() {
					return fmt.Errorf("cuda/tape: optimizer state %s: %d values, want %d", e.Name, len(e.F32), p.Numel())
				}
				copy(host[p.Offset:p.Offset+p.Numel()], e.F32)
				found++
			}
			if !o.adam {
				o.ranges[i].init = found == len(o.params[i])
			}
		}
		if err := o.state[k].CopyFrom(host); err != nil {
			return fmt.Errorf("cuda/tape: optimizer state %s to the device: %w", kind, err)
		}
	}
	return nil
}

// toHost loads the device's step count and state into the host optimizer.
func (o *deviceOptimizer) toHost(ctx context.Context) error {
	out := []nn.StateEntry{
		{Name: optim.KeyStep, Shape: []int{}, I64: []int64{o.steps}},
		{Name: optim.KeyLR, Shape: []int{}, F64: []float64{o.host.LR()}},
	}
	for _, e := range o.host.StateDict() {
		if e.Name == optim.KeyInitialLR {
			out = append(out, nn.StateEntry{Name: e.Name, Shape: []int{}, F64: append([]float64(nil), e.F64...)})
		}
	}
	for k, kind := range o.kinds {
		host, err := o.state[k].ToHost(ctx)
		if err != nil {
			return fmt.Errorf("cuda/tape: optimizer state %s to the host: %w", kind, err)
		}
		for i, r := range o.ranges {
			if !o.adam && !r.init {
				continue
			}
			for _, p := range o.params[i] {
				out = append(out, nn.StateEntry{Name: optim.Prefix + p.Name + "." + kind, Shape: append([]int(nil), p.Shape...),
					F32: host[p.Offset : p.Offset+p.Numel()]})
			}
		}
	}
	if err := o.host.LoadStateDict(out); err != nil {
		return fmt.Errorf("cuda/tape: optimizer state to the host optimizer: %w", err)
	}
	return nil
}
