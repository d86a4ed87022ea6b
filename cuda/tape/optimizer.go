package tape

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// deviceOptimizer is the device copy of an optim.SGD or optim.Adam/AdamW: its state
// (momentum, moments) as flat device buffers in ParamSet.Data's layout, its segments as
// flat ranges with their weight decay, and the scalars of the current step computed as
// optim computes them.
type deviceOptimizer struct {
	dev   *cuda.Device
	ps    *nn.ParamSet
	host  optim.Optimizer
	adam  bool
	decpl bool // AdamW
	hyper optim.Hyper
	segs  []devSegment
	state []*cuda.Tensor // SGD: [momentum] (none without momentum); Adam: [exp_avg, exp_avg_sq (, max_exp_avg_sq)]
	kinds []string       // the state-dict kind of each state buffer
	steps int64          // optim.step
	in    bool           // between begin and end
	lr    float64        // this step's learning rate
	adamK cuda.AdamArgs  // this step's Adam scalars (WeightDecay, Decay per segment)
}

// devSegment is one optim.Segment as a flat range of the model's buffers.
type devSegment struct {
	lo, hi int
	wd     float64
	init   bool // SGD: the momentum buffer holds a value
	first  bool // SGD, during a step: the buffer starts this step
	params []*nn.Param
}

// onDevice reports whether the device state can step host's kind of optimizer, and
// fills o's description of it when o is not nil: the one list of the kinds it steps.
func onDevice(host optim.Optimizer, o *deviceOptimizer) (segs []optim.Segment, ok bool) {
	switch h := host.(type) {
	case *optim.SGD:
		if o != nil {
			o.hyper = h.Hyper()
			if o.hyper.Momentum != 0 {
				o.kinds = []string{"momentum_buffer"}
			}
		}
		return h.Segments(), true
	case *optim.Adam:
		if o != nil {
			o.hyper, o.adam, o.decpl = h.Hyper(), true, h.Decoupled()
			o.kinds = []string{"exp_avg", "exp_avg_sq"}
			if o.hyper.AMSGrad {
				o.kinds = append(o.kinds, "max_exp_avg_sq")
			}
		}
		return h.Segments(), true
	}
	return nil, false
}

func newDeviceOptimizer(dev *cuda.Device, ps *nn.ParamSet, host optim.Optimizer) (*deviceOptimizer, error) {
	o := &deviceOptimizer{dev: dev, ps: ps, host: host}
	segs, ok := onDevice(host, o)
	if !ok {
		return nil, fmt.Errorf("cuda/tape: the device optimizer copies optim.SGD, Adam or AdamW, not %T", host)
	}
	kernel := "sgd_f32"
	if o.adam {
		kernel = "adam_f32"
	}
	if err := dev.Kernel(kernel); err != nil { // at construction, not at the first step
		return nil, fmt.Errorf("cuda/tape: device optimizer: %w", err)
	}
	for i, sg := range segs {
		lo, ok := offsetIn(ps.Data, sg.Data)
		if !ok {
			return nil, fmt.Errorf("cuda/tape: optimizer segment %d (%s) does not lie in the model's parameter buffer", i, sg.Name)
		}
		ds := devSegment{lo: lo, hi: lo + len(sg.Data), wd: sg.WeightDecay}
		for _, pt := range sg.Parts {
			p := ps.Param(pt.Param)
			if p == nil || pt.ParamOffset != 0 || pt.Len != p.Numel() {
				return nil, fmt.Errorf("cuda/tape: optimizer segment %s holds part of a parameter (a shard): not on the device", sg.Name)
			}
			ds.params = append(ds.params, p)
		}
		if len(sg.Parts) == 0 {
			return nil, fmt.Errorf("cuda/tape: optimizer segment %s names no parameters", sg.Name)
		}
		o.segs = append(o.segs, ds)
	}
	for range o.kinds {
		t, err := dev.Alloc(cuda.Float32, len(ps.Data))
		if err != nil {
			o.free()
			return nil, fmt.Errorf("cuda/tape: optimizer state (%d floats): %w", len(ps.Data), err)
		}
		o.state = append(o.state, t)
	}
	if err := o.fromHost(); err != nil {
		o.free()
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

func (o *deviceOptimizer) free() {
	for _, t := range o.state {
		t.Free()
	}
	o.state = nil
}

// begin computes the step's scalars as optim's BeginStep does.
func (o *deviceOptimizer) begin() error {
	if o.in {
		return fmt.Errorf("%w: device optimizer: BeginStep before the previous step's EndStep", optim.ErrStepState)
	}
	o.in = true
	o.lr = o.host.LR()
	// A schedule may move the momentum (OneCycleLR) as it moves the rate.
	if h, ok := o.host.(interface{ Hyper() optim.Hyper }); ok {
		o.hyper = h.Hyper()
	}
	if !o.adam {
		for i := range o.segs {
			o.segs[i].first = !o.segs[i].init
		}
		return nil
	}
	o.steps++
	o.adamK = cuda.AdamArgs{AdamScalars: o.hyper.AdamStep(o.lr, o.steps), Decoupled: o.decpl, Maximize: o.hyper.Maximize}
	return nil
}

// stepRange launches the update of every segment's elements within [lo, hi).
func (o *deviceOptimizer) stepRange(data, grad *cuda.Tensor, lo, hi int) error {
	if !o.in {
		return fmt.Errorf("%w: device optimizer: StepRange without BeginStep", optim.ErrStepState)
	}
	for i := range o.segs {
		sg := &o.segs[i]
		a, z := max(lo, sg.lo), min(hi, sg.hi)
		if a >= z {
			continue
		}
		if err := o.update(sg, data, grad, a, z); err != nil {
			return fmt.Errorf("cuda/tape: device optimizer on elements [%d,%d): %w", a, z, err)
		}
	}
	return nil
}

func (o *deviceOptimizer) update(sg *devSegment, data, grad *cuda.Tensor, lo, hi int) error {
	n := hi - lo
	views := make([]*cuda.Tensor, 0, 2+len(o.state))
	for _, t := range append([]*cuda.Tensor{data, grad}, o.state...) {
		v, err := t.View(lo, n)
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	h := o.hyper
	if !o.adam {
		var buf *cuda.Tensor
		if len(o.state) > 0 {
			buf = views[2]
		}
		return o.dev.SGD(views[0], views[1], buf, cuda.SGDArgs{
			NegLR: float32(-o.lr), Momentum: float32(h.Momentum), Damp: float32(1 - h.Dampening),
			WeightDecay: float32(sg.wd), First: sg.first, Nesterov: h.Nesterov, Maximize: h.Maximize,
		})
	}
	k := o.adamK.WithWeightDecay(o.lr, sg.wd)
	var vmax *cuda.Tensor
	if len(views) > 4 {
		vmax = views[4]
	}
	return o.dev.Adam(views[0], views[1], views[2], views[3], vmax, k)
}

// end ends the step as optim's EndStep does.
func (o *deviceOptimizer) end() error {
	if !o.in {
		return fmt.Errorf("%w: device optimizer: EndStep without BeginStep", optim.ErrStepState)
	}
	o.in = false
	if !o.adam {
		for i := range o.segs {
			o.segs[i].init = true
		}
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
		for i := range o.segs {
			sg := &o.segs[i]
			found := 0
			for _, p := range sg.params {
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
				sg.init = found == len(sg.params)
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
		for _, sg := range o.segs {
			if !o.adam && !sg.init {
				continue
			}
			for _, p := range sg.params {
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
