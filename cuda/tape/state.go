package tape

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	G "gorgonia.org/gorgonia"
)

// State is a model's training state on a device: its parameters and gradient buffer as two
// flat device buffers in nn.ParamSet's layout (so a DDP bucket is a range of Grads, as on
// the host), and the device copy of the optim optimizer that the build options of a Compile
// give (nn.WithOptimizer, where every strategy takes it). Programs compiled from it
// (State.Compile) read the parameters where they lie, add each gradient into the device
// buffer at its GradHook, with no copy to the host, and step on the device.
//
// The device is the master copy from NewState on. The host's ParamSet.Data and the host
// optimizer's state are brought up to date by ToHost (before a checkpoint, a state dict, a
// host-side check of the parameters); after the host changed them (a restored checkpoint, a
// broadcast) FromHost copies them back in. The model's buffers (BatchNorm's running
// statistics) stay the host's, as for tape.Compile (Note [Running statistics on the
// device]). The host's ParamSet.Grad is not used.
//
// A State is used from one goroutine, as the device's stream is.
type State struct {
	dev   *cuda.Device
	model *nn.Model
	data  *cuda.Tensor // parameters, ParamSet.Data's layout
	grad  *cuda.Tensor // gradients, ParamSet.Grad's layout
	opt   *deviceOptimizer
	cur   *cuda.Tensor // the gradient a GradHook is handing to sink
	views map[*nn.Param][2]*cuda.Tensor

	// A unit state's (NewUnitState, units.go): no data or grad buffer.
	units  []Unit
	hooks  UnitHooks
	unitOf map[*nn.Param]int
}

// NewState copies m's parameters to dev and zeroes the device gradient buffer. The state has
// no optimizer until a Compile gives it one.
func NewState(dev *cuda.Device, m *nn.Model) (*State, error) {
	if dev == nil {
		return nil, fmt.Errorf("cuda/tape: no device (open one with cuda.Open)")
	}
	if m == nil || m.Params == nil {
		return nil, fmt.Errorf("cuda/tape: nil model")
	}
	ps := m.Params
	s := &State{dev: dev, model: m, views: map[*nn.Param][2]*cuda.Tensor{}}
	var err error
	if s.data, err = dev.FromHost(ps.Data, len(ps.Data)); err != nil {
		return nil, fmt.Errorf("cuda/tape: parameters (%d floats) to the device: %w", len(ps.Data), err)
	}
	if s.grad, err = dev.Alloc(cuda.Float32, len(ps.Grad)); err != nil {
		s.Close()
		return nil, fmt.Errorf("cuda/tape: gradient buffer (%d floats): %w", len(ps.Grad), err)
	}
	if err := dev.Zero(s.grad); err != nil {
		s.Close()
		return nil, fmt.Errorf("cuda/tape: zeroing the gradient buffer: %w", err)
	}
	for _, p := range ps.Params {
		dv, err := s.data.View(p.Offset, p.Shape...)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("cuda/tape: parameter %s: %w", p.Name, err)
		}
		gv, err := s.grad.View(p.Offset, p.Shape...)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("cuda/tape: gradient of %s: %w", p.Name, err)
		}
		s.views[p] = [2]*cuda.Tensor{dv, gv}
	}
	return s, nil
}

// Device is the device the state lies on.
func (s *State) Device() *cuda.Device { return s.dev }

// Model is the model whose state this is.
func (s *State) Model() *nn.Model { return s.model }

// Params is the flat parameter buffer (ParamSet.Data's layout) on the device.
func (s *State) Params() *cuda.Tensor { return s.data }

// Grads is the flat gradient buffer (ParamSet.Grad's layout) on the device.
func (s *State) Grads() *cuda.Tensor { return s.grad }

// HasOptimizer reports whether a Compile gave the state its optimizer.
func (s *State) HasOptimizer() bool { return s.opt != nil }

// Compile builds m with build and the options as tape.Compile does, but the program reads
// the parameters from the state's device buffer and adds every gradient into the state's
// device gradient buffer at its GradHook (no host copy), then runs the options' gradient
// hooks (nn.WithGradHook: DDP's "this gradient is ready"), in backward order; its Step is
// the device optimizer's.
//
// The optimizer is the options' nn.WithOptimizer, as for every strategy on the host: optim's
// SGD, Adam or AdamW (OptimizerOf), copied to the device by the first Compile that gives one
// and succeeds (the host optimizer stays the source of the learning rate and receives the
// device's state at ToHost). A later Compile may give the same optimizer or none (an evaluation program);
// another one is an error naming both, as are nn.WithSolver and an optimizer the device
// cannot step. Do not pass nn.WithGradBuffer, nn.WithGradSink or nn.WithParamBacking: the
// state is the buffer.
func (s *State) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	host, err := s.newOptimizer(opts)
	if err != nil {
		return nil, err
	}
	// The program's Step is the state's: nn compiles no host update.
	all := append(append([]nn.BuildOption(nil), opts...), nn.WithOptimizer(nil), nn.WithSolver(nil), nn.WithGradSink(s.sink))
	p, err := compile(s.dev, s.model, build, s, all)
	if err != nil || host == nil {
		return p, err
	}
	if s.opt, err = newDeviceOptimizer(s.dev, s.model.Params, host); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// OptimizerOf returns the optimizer that a State takes from the build options (nn.WithOptimizer:
// optim's SGD, Adam or AdamW), nil where they give none, or an error naming the option that a
// device state cannot step: nn.WithSolver (a gorgonia solver steps host memory) or an
// optimizer other than those three. An engine that compiles on a State checks its caller's
// build options with it before it compiles.
func OptimizerOf(opts ...nn.BuildOption) (optim.Optimizer, error) {
	up, solver := nn.Updates(opts...)
	if solver != nil {
		return nil, fmt.Errorf("cuda/tape: nn.WithSolver(%T): a gorgonia solver steps the parameters in host memory, which the device state does not update: give nn.WithOptimizer an optim.SGD, Adam or AdamW", solver)
	}
	if up == nil {
		return nil, nil
	}
	if o, ok := up.(optim.Optimizer); ok {
		if _, ok := onDevice(o, nil); ok {
			return o, nil
		}
	}
	return nil, fmt.Errorf("cuda/tape: nn.WithOptimizer(%T): the device state steps optim's SGD, Adam or AdamW; this optimizer runs in host memory only", up)
}

// newOptimizer returns the options' optimizer when the state is to take it (it has none
// yet), nil when it gives none or the state's own, and refuses another one.
func (s *State) newOptimizer(opts []nn.BuildOption) (optim.Optimizer, error) {
	host, err := OptimizerOf(opts...)
	switch {
	case err != nil || host == nil:
		return nil, err
	case s.opt != nil && s.opt.host != host:
		return nil, fmt.Errorf("cuda/tape: nn.WithOptimizer(%T %p): the device state already steps with the %T %p of an earlier Compile: compile every program of a state with the same optimizer, or none", host, host, s.opt.host, s.opt.host)
	case s.opt != nil:
		return nil, nil
	case s.grad == nil:
		return nil, fmt.Errorf("cuda/tape: nn.WithOptimizer(%T): a unit state's hooks step the parameters: compile it without an optimizer", host)
	}
	return host, nil
}

// sink adds the gradient being handed over (s.cur, on the device) into p's range of the
// device gradient buffer; the host slice nn passes is a placeholder and is not read.
func (s *State) sink(p *nn.Param, _ []float32) error {
	if s.cur == nil {
		return fmt.Errorf("cuda/tape: gradient of %s handed to the device state outside a device program", p.Name)
	}
	var dst *cuda.Tensor
	if s.hooks != nil {
		var err error
		if dst, err = s.unitGrad(p); err != nil {
			return err
		}
	} else {
		v, ok := s.views[p]
		if !ok {
			return fmt.Errorf("cuda/tape: parameter %s is not in the device state's model", p.Name)
		}
		dst = v[1]
	}
	g, err := s.cur.View(0, p.Shape...)
	if err != nil {
		return fmt.Errorf("cuda/tape: gradient of %s: %w", p.Name, err)
	}
	if err := s.dev.Add(dst, dst, g); err != nil {
		return fmt.Errorf("cuda/tape: adding the gradient of %s: %w", p.Name, err)
	}
	return nil
}

// paramView is p's view of the device parameter buffer.
func (s *State) paramView(p *nn.Param) *cuda.Tensor { return s.views[p][0] }

// GradRange is elements [lo, hi) of the device gradient buffer (a DDP bucket).
func (s *State) GradRange(lo, hi int) (*cuda.Tensor, error) {
	if s.grad == nil {
		return nil, fmt.Errorf("cuda/tape: a unit state has no gradient buffer")
	}
	return s.grad.View(lo, hi-lo)
}

// ScaleGrad multiplies p's gradient on the device by f (DDP's division by the world size).
func (s *State) ScaleGrad(p *nn.Param, f float32) error {
	v, ok := s.views[p]
	if !ok {
		return fmt.Errorf("cuda/tape: parameter %s is not in the device state's model", p.Name)
	}
	return s.dev.Scale(v[1], v[1], f)
}

// ZeroGrad zeroes the device gradient buffer.
func (s *State) ZeroGrad() error {
	if s.grad == nil {
		return nil // a unit state: the hooks own the gradients
	}
	if err := s.dev.Zero(s.grad); err != nil {
		return fmt.Errorf("cuda/tape: zeroing the gradients: %w", err)
	}
	return nil
}

// Update applies the device optimizer to every parameter, without zeroing the gradients.
// Without an optimizer (no Compile gave one) it is an error.
func (s *State) Update(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.BeginStep(); err != nil {
		return err
	}
	if err := s.StepRange(0, s.grad.Len()); err != nil {
		return err
	}
	return s.EndStep()
}

// Step is Update, then ZeroGrad (train's Step).
func (s *State) Step(ctx context.Context) error {
	if err := s.Update(ctx); err != nil {
		return err
	}
	return s.ZeroGrad()
}

// BeginStep starts an optimizer step applied in pieces by StepRange (DDP's per-bucket
// update): it reads the host optimizer's learning rate and computes the step's scalars.
func (s *State) BeginStep() error {
	if s.opt == nil {
		return errNoOptimizer
	}
	return s.opt.begin()
}

// StepRange updates the parameters whose gradients lie in elements [lo, hi) of the flat
// buffer, on the device's stream. Disjoint ranges covering the buffer, in any order, give
// what one whole step gives.
func (s *State) StepRange(lo, hi int) error {
	if s.opt == nil {
		return errNoOptimizer
	}
	return s.opt.StepRange(s.data, s.grad, lo, hi)
}

// EndStep ends a step started by BeginStep.
func (s *State) EndStep() error {
	if s.opt == nil {
		return errNoOptimizer
	}
	return s.opt.end()
}

// ToHost copies the device parameters into the model's ParamSet.Data and the device
// optimizer's step count and state into the host optimizer (LoadStateDict), so that
// checkpoints, state dicts and host-side checks see the device's values. It waits for the
// device.
func (s *State) ToHost(ctx context.Context) error {
	if err := s.ParamsToHost(ctx); err != nil {
		return err
	}
	if s.opt != nil {
		if err := s.opt.toHost(ctx); err != nil {
			return err
		}
	}
	return nil
}

// ParamsToHost copies the device parameters into the model's ParamSet.Data (not the
// optimizer's state): what a host-side check of the parameters needs. It waits for the
// device.
func (s *State) ParamsToHost(ctx context.Context) error {
	if s.data == nil {
		return fmt.Errorf("cuda/tape: a unit state has no parameter buffer (its hooks hold the parameters)")
	}
	if err := s.data.CopyTo(ctx, s.model.Params.Data); err != nil {
		return fmt.Errorf("cuda/tape: parameters to the host: %w", err)
	}
	return nil
}

// FromHost copies the model's ParamSet.Data and the host optimizer's state to the device:
// after a checkpoint was restored or the parameters broadcast on the host. It overwrites
// every device value with the host's, which lag the device's since the last ToHost: to
// change one value on the host, ToHost first.
func (s *State) FromHost() error {
	if s.data == nil {
		return fmt.Errorf("cuda/tape: a unit state has no parameter buffer (its hooks hold the parameters)")
	}
	if err := s.data.CopyFrom(s.model.Params.Data); err != nil {
		return fmt.Errorf("cuda/tape: parameters to the device: %w", err)
	}
	if s.opt != nil {
		if err := s.opt.fromHost(); err != nil {
			return err
		}
	}
	return nil
}

// Close frees the state's device memory.
func (s *State) Close() {
	s.data.Free()
	s.grad.Free()
	if s.opt != nil {
		s.opt.Free()
	}
}

var errNoOptimizer = errors.New("cuda/tape: Step: the device state has no optimizer: give nn.WithOptimizer to the Compile of its training program")

// deviceHook is a GradHook under a State: the gradient, on the device, is handed to the
// state's sink through nn's hook (placeholder host value of the right shape, never read).
func (s *State) runHook(op G.Op, grad *cuda.Tensor, placeholder G.Value) error {
	s.cur = grad
	defer func() { s.cur = nil }()
	_, err := op.Do(placeholder)
	return err
}
