// Package gpuresnet runs a torchvision ResNet's training step on a GPU with the cuda
// package's ops: the parameters of an nn.Model built from models/resnet are uploaded by name,
// the forward pass records a backward closure per layer, and the backward pass writes one
// gradient per parameter in the model's names, which Grads copies into the layout of the
// model's flat gradient buffer (nn.ParamSet.Grad), so DDP and the optimizers take them
// unchanged. It is the first instance of the device execution described in package cuda:
// the module tree's structure (models/resnet.Config) drives device ops directly.
//
// Limits: groups must be 1 (no ResNeXt), num_batches_tracked is not advanced on the device.
package gpuresnet

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
)

// Option configures New.
type Option func(*ResNet)

// WithAutocast runs convolutions and the classifier with 16-bit operands (cuda.Float16 or
// cuda.BFloat16) and float32 accumulation, as torch.autocast; norms, pooling and the loss
// stay float32.
func WithAutocast(dt cuda.DType) Option { return func(r *ResNet) { r.amp = dt } }

// ResNet is a ResNet's parameters, gradients and buffers on one device.
type ResNet struct {
	d      *cuda.Device
	cfg    resnet.Config
	ps     *nn.ParamSet
	amp    cuda.DType
	params map[string]*cuda.Tensor
	grads  map[string]*cuda.Tensor
	bufs   map[string]*cuda.Tensor
	mom    map[string]*cuda.Tensor
}

// New uploads m's parameters and float buffers to d. m.Root must be a *resnet.ResNet.
func New(d *cuda.Device, m *nn.Model, opts ...Option) (*ResNet, error) {
	root, ok := m.Root.(*resnet.ResNet)
	if !ok {
		return nil, fmt.Errorf("gpuresnet: model root is %T, want *resnet.ResNet", m.Root)
	}
	r := &ResNet{d: d, cfg: root.Config(), ps: m.Params, amp: cuda.Float32,
		params: map[string]*cuda.Tensor{}, grads: map[string]*cuda.Tensor{}, bufs: map[string]*cuda.Tensor{}, mom: map[string]*cuda.Tensor{}}
	for _, o := range opts {
		o(r)
	}
	if r.cfg.Groups != 1 {
		return nil, fmt.Errorf("gpuresnet: groups=%d: grouped convolution is not implemented on the GPU", r.cfg.Groups)
	}
	for _, p := range m.Params.Params {
		t, err := d.FromHost(p.Data, p.Shape...)
		if err != nil {
			r.Free()
			return nil, fmt.Errorf("gpuresnet: uploading %s: %w", p.Name, err)
		}
		r.params[p.Name] = t
		g, err := d.Alloc(cuda.Float32, p.Shape...)
		if err != nil {
			r.Free()
			return nil, fmt.Errorf("gpuresnet: gradient of %s: %w", p.Name, err)
		}
		r.grads[p.Name] = g
	}
	for _, b := range m.Params.Buffers {
		if b.Data == nil {
			continue
		}
		t, err := d.FromHost(b.Data, b.Shape...)
		if err != nil {
			r.Free()
			return nil, fmt.Errorf("gpuresnet: uploading %s: %w", b.Name, err)
		}
		r.bufs[b.Name] = t
	}
	return r, nil
}

// Free releases the device tensors.
func (r *ResNet) Free() {
	for _, m := range []map[string]*cuda.Tensor{r.params, r.grads, r.bufs, r.mom} {
		for k, t := range m {
			t.Free()
			delete(m, k)
		}
	}
}

// Result is what a step returns to the host.
type Result struct {
	// Loss is the mean cross-entropy of the batch.
	Loss float32
	// Logits [N, classes], when the step was asked for them.
	Logits []float32
}

// Step runs forward and backward on images x (NCHW float32, shape [N,3,H,W]) with class
// labels, leaving the gradients on the device (see Grads, SGD). It waits for the device to
// return the loss. withLogits also copies the logits back.
func (r *ResNet) Step(ctx context.Context, x []float32, shape []int, labels []int32, withLogits bool) (*Result, error) {
	if len(shape) != 4 || len(labels) != shape[0] {
		return nil, fmt.Errorf("gpuresnet: input %v with %d labels", shape, len(labels))
	}
	d := r.d
	in, err := d.FromHost(x, shape...)
	if err != nil {
		return nil, err
	}
	lab, err := d.FromHostInt32(labels, len(labels))
	if err != nil {
		in.Free()
		return nil, err
	}
	t := &tape{d: d}
	defer t.release()
	t.keep(in, lab)
	logits, back, err := r.forward(t, in)
	if err != nil {
		return nil, err
	}
	n := shape[0]
	loss := t.alloc(cuda.Float32, n)
	dlogits := t.alloc(cuda.Float32, logits.Shape()...)
	if t.err != nil {
		return nil, t.err
	}
	prob, err := d.CrossEntropy(loss, logits, lab)
	if err != nil {
		return nil, err
	}
	t.keep(prob)
	if err := d.CrossEntropyBackward(dlogits, prob, lab, 1/float32(n)); err != nil {
		return nil, err
	}
	if _, err := back(dlogits); err != nil {
		return nil, err
	}
	res := &Result{}
	ls, err := loss.ToHost(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range ls {
		res.Loss += v / float32(n)
	}
	if withLogits {
		if res.Logits, err = logits.ToHost(ctx); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Eval runs the forward pass in evaluation mode (batch norm with the running statistics) on
// images x [N,3,H,W] and returns the logits [N, classes].
func (r *ResNet) Eval(ctx context.Context, x []float32, shape []int) ([]float32, error) {
	if len(shape) != 4 {
		return nil, fmt.Errorf("gpuresnet: input %v, want [N,3,H,W]", shape)
	}
	in, err := r.d.FromHost(x, shape...)
	if err != nil {
		return nil, err
	}
	t := &tape{d: r.d, eval: true}
	defer t.release()
	t.keep(in)
	logits, _, err := r.forward(t, in)
	if err != nil {
		return nil, err
	}
	return logits.ToHost(ctx)
}

// SetParams uploads the model's parameters again (after an optimizer stepped them on the
// host, e.g. under DDP with a host-side optimizer).
func (r *ResNet) SetParams() error {
	for _, p := range r.ps.Params {
		if err := r.params[p.Name].CopyFrom(p.Data); err != nil {
			return fmt.Errorf("gpuresnet: uploading %s: %w", p.Name, err)
		}
	}
	return nil
}

// Grads copies the gradients into grad, laid out as the model's nn.ParamSet.Grad.
func (r *ResNet) Grads(ctx context.Context, grad []float32) error {
	if len(grad) != len(r.ps.Grad) {
		return fmt.Errorf("gpuresnet: gradient buffer of %d, want %d", len(grad), len(r.ps.Grad))
	}
	for _, p := range r.ps.Params {
		g, err := r.grads[p.Name].ToHost(ctx)
		if err != nil {
			return fmt.Errorf("gpuresnet: gradient of %s: %w", p.Name, err)
		}
		copy(grad[p.Offset:p.Offset+len(p.Data)], g)
	}
	return nil
}

// Buffer copies a float buffer (BatchNorm running statistics) back to the host.
func (r *ResNet) Buffer(ctx context.Context, name string) ([]float32, error) {
	b, ok := r.bufs[name]
	if !ok {
		return nil, fmt.Errorf("gpuresnet: no buffer %q", name)
	}
	return b.ToHost(ctx)
}

// SGD updates the parameters on the device as torch.optim.SGD with momentum (no weight
// decay): buf = momentum*buf + grad; param -= lr*buf.
func (r *ResNet) SGD(lr, momentum float32) error {
	var errs []error
	for _, p := range r.ps.Params {
		g := r.grads[p.Name]
		buf, ok := r.mom[p.Name]
		if !ok {
			var err error
			if buf, err = r.d.Alloc(cuda.Float32, p.Shape...); err != nil {
				return err
			}
			if err := r.d.Fill(buf, 0); err != nil {
				return err
			}
			r.mom[p.Name] = buf
		}
		errs = append(errs, r.d.Axpby(buf, g, 1, momentum), r.d.Axpby(r.params[p.Name], buf, -lr, 1))
	}
	return errors.Join(errs...)
}
