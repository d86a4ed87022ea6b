// Package modelstep holds what the device training steps of cuda/gpuresnet and cuda/gpuswin
// share: the model's parameters, gradients, float buffers and momentum on one device, keyed
// by the nn.Model's names (State), and the per-step tape that owns a step's tensors (Tape).
package modelstep

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn"
)

// BackFn maps the gradient of a layer's output to the gradient of its input, writing its
// parameters' gradients on the way.
type BackFn func(dy *cuda.Tensor) (*cuda.Tensor, error)

// State is a model's parameters, gradients, float buffers and momentum on one device, each
// keyed by its name in the model's nn.ParamSet.
type State struct {
	Dev   *cuda.Device
	PS    *nn.ParamSet
	Param map[string]*cuda.Tensor // parameters
	Grad  map[string]*cuda.Tensor // one gradient per parameter, written by the backward pass
	Buf   map[string]*cuda.Tensor // float buffers (UploadBuffers)
	Mom   map[string]*cuda.Tensor // SGD momentum, allocated by the first SGD
	pkg   string                  // prefix of error messages
}

// NewState returns an empty State for ps on d; pkg prefixes its error messages.
func NewState(pkg string, d *cuda.Device, ps *nn.ParamSet) *State {
	return &State{Dev: d, PS: ps, pkg: pkg,
		Param: map[string]*cuda.Tensor{}, Grad: map[string]*cuda.Tensor{}, Buf: map[string]*cuda.Tensor{}, Mom: map[string]*cuda.Tensor{}}
}

// Upload uploads the parameters and allocates their gradients. On an error the caller frees
// what was uploaded (Free).
func (s *State) Upload() error {
	for _, p := range s.PS.Params {
		t, err := s.Dev.FromHost(p.Data, p.Shape...)
		if err != nil {
			return fmt.Errorf("%s: uploading %s: %w", s.pkg, p.Name, err)
		}
		s.Param[p.Name] = t
		g, err := s.Dev.Alloc(cuda.Float32, p.Shape...)
		if err != nil {
			return fmt.Errorf("%s: gradient of %s: %w", s.pkg, p.Name, err)
		}
		s.Grad[p.Name] = g
	}
	return nil
}

// UploadBuffers uploads the float buffers (those with Data). On an error the caller frees
// what was uploaded (Free).
func (s *State) UploadBuffers() error {
	for _, b := range s.PS.Buffers {
		if b.Data == nil {
			continue
		}
		t, err := s.Dev.FromHost(b.Data, b.Shape...)
		if err != nil {
			return fmt.Errorf("%s: uploading %s: %w", s.pkg, b.Name, err)
		}
		s.Buf[b.Name] = t
	}
	return nil
}

// Free releases the device tensors.
func (s *State) Free() {
	for _, m := range []map[string]*cuda.Tensor{s.Param, s.Grad, s.Buf, s.Mom} {
		FreeAll(m)
	}
}

// FreeAll frees the tensors of m and empties it.
func FreeAll[K comparable](m map[K]*cuda.Tensor) {
	for k, t := range m {
		t.Free()
		delete(m, k)
	}
}

// SetParams uploads the model's parameters again.
func (s *State) SetParams() error {
	for _, p := range s.PS.Params {
		if err := s.Param[p.Name].CopyFrom(p.Data); err != nil {
			return fmt.Errorf("%s: uploading %s: %w", s.pkg, p.Name, err)
		}
	}
	return nil
}

// Grads copies the gradients into grad, laid out as the model's nn.ParamSet.Grad.
func (s *State) Grads(ctx context.Context, grad []float32) error {
	if len(grad) != len(s.PS.Grad) {
		return fmt.Errorf("%s: gradient buffer of %d, want %d", s.pkg, len(grad), len(s.PS.Grad))
	}
	for _, p := range s.PS.Params {
		g, err := s.Grad[p.Name].ToHost(ctx)
		if err != nil {
			return fmt.Errorf("%s: gradient of %s: %w", s.pkg, p.Name, err)
		}
		copy(grad[p.Offset:p.Offset+len(p.Data)], g)
	}
	return nil
}

// SGD updates the parameters on the device as torch.optim.SGD with momentum (no weight
// decay): buf = momentum*buf + grad; param -= lr*buf.
func (s *State) SGD(lr, momentum float32) error {
	var errs []error
	for _, p := range s.PS.Params {
		g := s.Grad[p.Name]
		buf, ok := s.Mom[p.Name]
		if !ok {
			var err error
			if buf, err = s.Dev.Alloc(cuda.Float32, p.Shape...); err != nil {
				return err
			}
			if err := s.Dev.Fill(buf, 0); err != nil {
				return err
			}
			s.Mom[p.Name] = buf
		}
		errs = append(errs, s.Dev.Axpby(buf, g, 1, momentum), s.Dev.Axpby(s.Param[p.Name], buf, -lr, 1))
	}
	return errors.Join(errs...)
}
