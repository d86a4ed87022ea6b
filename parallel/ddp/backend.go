package ddp

import (
	"context"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Backend is where a DDP's model runs and how its buckets' bytes move. The DDP is the
// reducer: it decides when (which gradient is final, which bucket to launch, when the step
// may use a bucket's result, the rebuild, Join, the timeline) and does no I/O of its own
// beyond the small control messages over its comm.Group; a Backend does what it is told and
// reports completion through comm.Work. The host backend (New's) runs nn programs in host
// memory and reduces over the comm.Group; cuda/devddp's runs on a device and reduces
// device memory with NCCL.
//
// The DDP calls a Backend from the goroutine that drives it. In a synchronised step: Divide
// (default reduction only) and Launch as gradients become final, Launch in bucket order;
// then Land once per bucket, in bucket order.
type Backend interface {
	// Accept is called once, by New (WithBackend) after the models were checked and rank
	// 0's parameters broadcast, with the DDP's model and the options that concern the
	// backend; it makes what the backend holds of the model (a device copy of its
	// parameters) and returns an error naming the option it cannot honour, or saying why
	// it cannot hold the model.
	Accept(m *nn.Model, s Settings) error
	// Compile builds the model with build; opts hold the caller's options (the optimizer,
	// nn.WithOptimizer, among them) and DDP's gradient hook (and, under SyncBatchNorm, its
	// statistics reducer).
	Compile(build nn.BuildFunc, opts ...nn.BuildOption) (Executor, error)
	// Layout is given the buckets, in launch order, before their first Launch and each
	// time they change (the rebuild after the first synchronised step). No bucket's
	// reduction is outstanding then.
	Layout(buckets []*Bucket) error
	// Divide divides p's gradient, final for this step, by the world size where it lies:
	// the default reduction (AllReduceHook) divides each gradient as it arrives, then sums.
	Divide(p *nn.Param) error
	// Launch starts the reduction of b, every gradient of which is final, with h (the
	// hook Accept was given) and returns without waiting for the reduction. A failure is
	// the Work's. ctx bounds what Launch itself waits for: a device backend running a hook
	// that computes in host memory waits for b's gradients to reach the host first.
	Launch(ctx context.Context, b *Bucket, h CommHook) comm.Work
	// Land makes what the step does next (the optimizer's update of b, the caller's read
	// of the gradients) see b's reduced gradients: the average over the ranks. w is b's
	// Work. It may return before w completes where the backend orders the two itself (a
	// device stream waiting for an event).
	Land(ctx context.Context, b *Bucket, w comm.Work) error
	// ZeroGrad zeroes the gradients.
	ZeroGrad() error
	// ReadParams brings the model's ParamSet.Data up to date with the backend's
	// parameters, for a host-side read (the agreement check).
	ReadParams(ctx context.Context) error
	// WriteParams runs fn on ParamSet.Data brought up to date, then makes the backend's
	// parameters (and any state it keeps beside them) what fn left.
	WriteParams(ctx context.Context, fn func(data []float32) error) error
}

// Settings are the options of New that a Backend may not be able to honour.
type Settings struct {
	// Hook is WithCommHook's hook (AllReduceHook by default).
	Hook CommHook
	// SyncBN is whether SyncBatchNorm was given.
	SyncBN bool
	// Group is the DDP's process group: the one a hook is given on the host path, and so
	// the one a backend gives a hook that it runs in host memory.
	Group comm.Group
}

// Executor is a backend's compiled program: what a Program runs.
type Executor interface {
	// Compiled is the nn program the model was built as (its graph, loss, mode and the
	// parameters it uses).
	Compiled() *nn.Program
	// Run runs forward and backward; each gradient, once final, reaches the gradient hook
	// Compile was given.
	Run(ctx context.Context) error
	// Update applies the optimizer (or solver) to every parameter. It does not zero the
	// gradients.
	Update(ctx context.Context) error
	// Ranged returns the per-bucket optimizer, or nil when the program's optimizer cannot
	// update bucket by bucket.
	Ranged() BucketStepper
	// SetInput, Input, Output, LossValue and Close are train.Program's.
	SetInput(name string, data []float32) error
	Input(name string) ([]float32, error)
	Output(name string) ([]float32, error)
	LossValue() (float32, error)
	Close() error
}

// BucketStepper applies one optimizer step bucket by bucket (RunStep's overlap):
// BeginStep before the first bucket, StepBucket once per bucket after its reduction has
// landed, EndStep after the last. The buckets cover the gradient buffer, so the result is
// that of one whole step.
type BucketStepper interface {
	BeginStep() error
	StepBucket(b *Bucket) error
	EndStep() error
}

// hostBackend runs nn programs in host memory and reduces over the DDP's comm.Group.
type hostBackend struct {
	d   *DDP
	avg []bool // by bucket: the default hook all-reduces with comm.Avg (Note [Division in place])
}

func (h *hostBackend) Accept(*nn.Model, Settings) error { return nil }

func (h *hostBackend) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (Executor, error) {
	np, err := nn.Compile(h.d.Model, build, opts...)
	if err != nil {
		return nil, err
	}
	return hostExec{Program: np, d: h.d}, nil
}

func (h *hostBackend) Layout(buckets []*Bucket) error {
	n := h.d.size
	h.avg = make([]bool, len(buckets))
	for i, b := range buckets {
		// A power-of-two world only: comm divides by others with a cgo kernel, which
		// costs the communication goroutine its P (see comm's divideBlock).
		h.avg[i] = n&(n-1) == 0 && comm.InPlace(h.d.g, b.Grad)
	}
	return nil
}

func (h *hostBackend) Divide(p *nn.Param) error {
	if !h.avg[h.d.byParam[p.Index]] {
		DivideByWorld(h.d.Model.Params.Grad[p.Offset:p.Offset+p.Numel()], h.d.size)
	}
	return nil
}

func (h *hostBackend) Launch(_ context.Context, b *Bucket, hook CommHook) comm.Work {
	if !plainAllReduce(hook) {
		return hook.Reduce(h.d.g, b)
	}
	if h.avg[b.Index] {
		return h.d.g.AllReduce(comm.F32(b.Grad), comm.Avg) // divided in place (Note [Division in place])
	}
	return h.d.g.AllReduce(comm.F32(b.Grad), comm.Sum) // divided by Divide
}

func (h *hostBackend) Land(ctx context.Context, _ *Bucket, w comm.Work) error { return w.Wait(ctx) }

func (h *hostBackend) ZeroGrad() error { h.d.Model.Params.ZeroGrad(); return nil }

func (h *hostBackend) ReadParams(context.Context) error { return nil }

func (h *hostBackend) WriteParams(_ context.Context, fn func([]float32) error) error {
	return fn(h.d.Model.Params.Data)
}

// hostExec is an nn program as an Executor.
type hostExec struct {
	*nn.Program
	d *DDP
}

func (x hostExec) Compiled() *nn.Program        { return x.Program }
func (x hostExec) Update(context.Context) error { return x.Program.Update() }

// Ranged is the program's optimizer when it is an optim.Ranged over the model's gradient
// buffer (an optimizer that is not one steps whole after the last reduction).
func (x hostExec) Ranged() BucketStepper {
	r, ok := x.Optimizer().(optim.Ranged)
	if !ok || !r.GradsWithin(x.d.Model.Params.Grad) {
		return nil
	}
	return hostStepper{r: r, d: x.d}
}

// hostStepper updates a bucket in pieces, yielding between them to reductions still under
// way (Note [Yielding to communication]); pieces give the same bits (optim.Ranged).
type hostStepper struct {
	r optim.Ranged
	d *DDP
}

func (s hostStepper) BeginStep() error { return s.r.BeginStep() }
func (s hostStepper) EndStep() error   { return s.r.EndStep() }

func (s hostStepper) StepBucket(b *Bucket) error {
	for g := b.Grad; len(g) > 0; {
		n := min(len(g), stepPiece)
		if err := s.r.StepGrads(g[:n]); err != nil {
			return err
		}
		if g = g[n:]; len(g) > 0 {
			s.d.yieldToComm()
		}
	}
	return nil
}
