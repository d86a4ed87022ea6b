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
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/internal/modelstep"
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
	st  *modelstep.State
	cfg resnet.Config
	amp cuda.DType
}

// New uploads m's parameters and float buffers to d. m.Root must be a *resnet.ResNet.
func New(d *cuda.Device, m *nn.Model, opts ...Option) (*ResNet, error) {
	root, ok := m.Root.(*resnet.ResNet)
	if !ok {
		return nil, fmt.Errorf("gpuresnet: model root is %T, want *resnet.ResNet", m.Root)
	}
	r := &ResNet{st: modelstep.NewState("gpuresnet", d, m.Params), cfg: root.Config(), amp: cuda.Float32}
	for _, o := range opts {
		o(r)
	}
	if r.cfg.Groups != 1 {
		return nil, fmt.Errorf("gpuresnet: groups=%d: grouped convolution is not implemented on the GPU", r.cfg.Groups)
	}
	if err := r.st.Upload(); err != nil {
		r.Free()
		return nil, err
	}
	if err := r.st.UploadBuffers(); err != nil {
		r.Free()
		return nil, err
	}
	return r, nil
}

// Free releases the device tensors.
func (r *ResNet) Free() { r.st.Free() }

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
	d := r.st.Dev
	t := &tape{D: d, Train: true}
	defer t.Release()
	in, err := t.Upload(x, shape...)
	if err != nil {
		return nil, err
	}
	lab, err := t.UploadLabels(labels)
	if err != nil {
		return nil, err
	}
	logits, back, err := r.forward(t, in)
	if err != nil {
		return nil, err
	}
	mean, out, err := t.LossStep(ctx, "gpuresnet", logits, lab, back, withLogits)
	if err != nil {
		return nil, err
	}
	return &Result{Loss: mean, Logits: out}, nil
}

// Eval runs the forward pass in evaluation mode (batch norm with the running statistics) on
// images x [N,3,H,W] and returns the logits [N, classes].
func (r *ResNet) Eval(ctx context.Context, x []float32, shape []int) ([]float32, error) {
	if len(shape) != 4 {
		return nil, fmt.Errorf("gpuresnet: input %v, want [N,3,H,W]", shape)
	}
	t := &tape{D: r.st.Dev}
	defer t.Release()
	in, err := t.Upload(x, shape...)
	if err != nil {
		return nil, err
	}
	logits, _, err := r.forward(t, in)
	if err != nil {
		return nil, err
	}
	return logits.ToHost(ctx)
}

// SetParams uploads the model's parameters again (after an optimizer stepped them on the
// host, e.g. under DDP with a host-side optimizer).
func (r *ResNet) SetParams() error { return r.st.SetParams() }

// Grads copies the gradients into grad, laid out as the model's nn.ParamSet.Grad.
func (r *ResNet) Grads(ctx context.Context, grad []float32) error { return r.st.Grads(ctx, grad) }

// Buffer copies a float buffer (BatchNorm running statistics) back to the host.
func (r *ResNet) Buffer(ctx context.Context, name string) ([]float32, error) {
	b, ok := r.st.Buf[name]
	if !ok {
		return nil, fmt.Errorf("gpuresnet: no buffer %q", name)
	}
	return b.ToHost(ctx)
}

// SGD updates the parameters on the device as torch.optim.SGD with momentum (no weight
// decay): buf = momentum*buf + grad; param -= lr*buf.
func (r *ResNet) SGD(lr, momentum float32) error { return r.st.SGD(lr, momentum) }
