// Package devddp is DDP's device backend: ddp's reducer (buckets, rebuild, Join, hooks,
// static graph, unused parameters, timeline) over a model whose parameters, gradients and
// optimizer live on a CUDA device (tape.State), its buckets reduced by NCCL over device
// memory, ordered by CUDA events, while the device's backward goes on (docs/DESIGN.md §9,
// "DDP on the device"). The device is chosen by one option at ddp.New, and the optimizer is
// Compile's nn.WithOptimizer, as on the host:
//
//	nc, err := nccl.New(ctx, store, rank, size, nccl.WithDevice(ordinal))
//	be := devddp.NewBackend(dev, nc)
//	defer be.Close()
//	d, err := ddp.New(ctx, model, group, ddp.WithBackend(be)) // checks the models, broadcasts rank 0's, then the device state
//	p, err := d.Compile(build, nn.WithOptimizer(opt))        // optim's SGD, Adam or AdamW, stepped on the device
//	for each batch { p.SetInput(...); err = train.RunStep(ctx, p) }
//
// The split is PyTorch's c10d one: ddp decides when (the reducer), nccl moves device bytes
// (comm never imports ddp), tape runs the graph on the device and owns the device state;
// this package only does what ddp's Backend interface asks, on the device.
//
// A step divides, launches and lands each bucket in stream order, the host never waiting
// for a bucket, as docs/DESIGN.md §9 says (Divide, Launch, Land); a hook without a
// ddp.HookWire recipe runs on a pinned host copy of each bucket (Note [Host hooks on the
// device]).
//
// Host-side collectives keep ddp's order: the buffer broadcast before forward (BatchNorm's
// running statistics are the host's, Note [Running statistics on the device]), under
// SyncBatchNorm the statistics' sums in forward and backward, and, every CheckEvery steps,
// the agreement check over the parameters copied to the host.
package devddp

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
)

// Reducer all-reduces device memory in stream order: nccl.Group's AllReduceDeviceAfter,
// over Size ranks.
type Reducer interface {
	AllReduceDeviceAfter(p driver.DevPtr, n int, dt libnccl.DataType, op comm.Op, wait, done driver.Event) nccl.DeviceWork
	Size() int
}

// Backend is ddp.Backend on a CUDA device: a tape.State's device buffers, reduced by a
// Reducer, every hook taken as the package doc says. For a world that is not a power of two
// the division multiplies by the float32 reciprocal of the world size (within an ulp of the
// host's division).
type Backend struct {
	dev            *cuda.Device
	st             *tape.State // the DDP model's, made by Accept
	red            Reducer
	size           int
	wire           comm.DType     // the type buckets are reduced in (ddp.HookWire)
	wires          *cuda.Tensor   // 16-bit copy of the gradient buffer, for compressed hooks
	ready, reduced []driver.Event // by bucket index

	// A hook that computes in host memory (Note [Host hooks on the device]):
	group  comm.Group     // the DDP's group, given to the hook
	onHost bool           // the hook runs on the host (no ddp.HookWire recipe)
	pins   []*cuda.Pinned // by bucket index: the bucket's pinned host copy
	hosted []*ddp.Bucket  // by bucket index: the bucket over its pinned copy, as the hook sees it
}

// NewBackend returns the device backend on dev, its buckets reduced by red (an nccl.Group on
// dev over the DDP's ranks), for ddp.WithBackend; ddp.New accepts it (Accept). The
// optimizer is Compile's nn.WithOptimizer, copied to the device by the state
// (tape.State.Compile). Close it after the DDP's last step, or after ddp.New failed; the
// device and the groups are the caller's.
func NewBackend(dev *cuda.Device, red Reducer) *Backend {
	return &Backend{dev: dev, red: red, wire: comm.Float32}
}

// State is the device state of the DDP's model (its parameters, gradients and optimizer on
// the device): nil until ddp.New accepted the backend.
func (b *Backend) State() *tape.State { return b.st }

// Close destroys the bucket events, frees the 16-bit buffer and the pinned copies, and
// closes the device state.
func (b *Backend) Close() {
	if b.st == nil {
		return
	}
	c := b.dev.Context()
	for _, e := range append(b.ready, b.reduced...) {
		_ = c.EventDestroy(e)
	}
	b.ready, b.reduced = nil, nil
	b.wires.Free()
	b.wires = nil
	b.freePins()
	b.st.Close()
	b.st = nil
}

// Accept makes the device state of m, the DDP's model, whose parameters are rank 0's by
// then, and takes every hook (a ddp.HookWire recipe in device memory, any other over
// s.Group). SyncBatchNorm runs on the device (cuda/tape's Note [SyncBatchNorm on the
// device]), its statistics summed over the DDP's host group. It refuses a backend
// made without a device or reducer, one already accepted by a DDP (of another model, or of
// this one), and a group whose size is not the reducer's.
func (b *Backend) Accept(m *nn.Model, s ddp.Settings) error {
	switch {
	case b.dev == nil || b.red == nil:
		return fmt.Errorf("devddp: nil device or reducer: make the backend with devddp.NewBackend(dev, red)")
	case b.st != nil && b.st.Model() != m:
		return fmt.Errorf("devddp: the backend already holds the device state of another model: give each ddp.New its own devddp.NewBackend")
	case b.st != nil:
		return fmt.Errorf("devddp: the backend was already accepted by a ddp.New of this model: give each ddp.New its own devddp.NewBackend")
	case s.Group == nil:
		return fmt.Errorf("devddp: ddp.Settings without the DDP's group: give the backend to ddp.New (ddp.WithBackend)")
	case s.Group.Size() != b.red.Size():
		return fmt.Errorf("devddp: the DDP's group has world size %d and the device reducer %d: make the NCCL group over the DDP's ranks", s.Group.Size(), b.red.Size())
	}
	st, err := tape.NewState(b.dev, m)
	if err != nil {
		return fmt.Errorf("devddp: the model's state on device %d: %w", b.dev.Ordinal(), err)
	}
	b.st, b.size = st, b.red.Size()
	h := s.Hook
	dt, ok := ddp.HookWire(h)
	b.group, b.onHost = s.Group, !ok
	if !ok {
		return nil
	}
	b.wire = dt
	if dt == comm.Float32 {
		return nil
	}
	t := cuda.Float16
	if dt == comm.BFloat16 {
		t = cuda.BFloat16
	}
	n := st.Grads().Len()
	if b.wires, err = b.dev.Alloc(t, n); err != nil {
		b.Close()
		return fmt.Errorf("%T's 16-bit gradient buffer (%d values) on the device: %w", h, n, err)
	}
	return nil
}

// Compile compiles on the device state (tape.State.Compile): the options' nn.WithOptimizer
// (optim's SGD, Adam or AdamW) is the state's device optimizer, stepped bucket by bucket.
func (b *Backend) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (ddp.Executor, error) {
	tp, err := b.st.Compile(build, opts...)
	if err != nil {
		return nil, err
	}
	return exec{Program: tp, st: b.st}, nil
}

// Layout makes the events of buckets it has not seen yet (events are kept across layouts)
// and, for a hook run in host memory, each bucket's pinned host copy.
func (b *Backend) Layout(buckets []*ddp.Bucket) error {
	if b.onHost {
		return b.pinLayout(buckets)
	}
	c := b.st.Device().Context()
	for len(b.ready) < len(buckets) {
		for _, evs := range []*[]driver.Event{&b.ready, &b.reduced} {
			e, err := c.EventCreate(false)
			if err != nil {
				return fmt.Errorf("bucket events: %w", err)
			}
			*evs = append(*evs, e)
		}
	}
	return nil
}

// Divide scales p's device gradient by 1/size on the compute stream.
func (b *Backend) Divide(p *nn.Param) error {
	if b.size == 1 {
		return nil
	}
	return b.st.ScaleGrad(p, 1/float32(b.size))
}

// Launch records the bucket's ready event on the compute stream (after compressing it into
// the 16-bit buffer, for a compressed hook) and all-reduces it on the group's stream after
// that event. A hook run in host memory is given the bucket's pinned copy once the device
// has written it (Note [Host hooks on the device]); ctx bounds that wait.
func (b *Backend) Launch(ctx context.Context, bk *ddp.Bucket, h ddp.CommHook) comm.Work {
	if b.onHost {
		hb, err := b.toHost(ctx, bk)
		if err != nil {
			return nccl.FailedDeviceWork(err)
		}
		return h.Reduce(b.group, hb)
	}
	src, dt, err := b.prepare(bk)
	dev := b.st.Device()
	if err == nil {
		err = dev.Context().EventRecord(b.ready[bk.Index], dev.Stream())
	}
	if err != nil {
		return nccl.FailedDeviceWork(err)
	}
	return b.red.AllReduceDeviceAfter(src.Ptr(), src.Len(), dt, comm.Sum, b.ready[bk.Index], b.reduced[bk.Index])
}

// prepare returns what Launch reduces: the bucket's gradients, or, for a compressed hook,
// their 16-bit copy holding round(round(g)/size) as the host hooks compute it.
func (b *Backend) prepare(bk *ddp.Bucket) (*cuda.Tensor, libnccl.DataType, error) {
	g, err := b.st.GradRange(bk.Lo, bk.Hi)
	if err != nil || b.wire == comm.Float32 {
		return g, libnccl.Float32, err
	}
	w, err := b.wires.View(bk.Lo, bk.Hi-bk.Lo)
	if err != nil {
		return nil, 0, err
	}
	dev := b.st.Device()
	if err := dev.Cast(w, g); err != nil {
		return nil, 0, fmt.Errorf("rounding %s to 16 bits: %w", bk, err)
	}
	if b.size > 1 {
		// g holds the rounded values while they are divided (it is overwritten with the
		// result when the bucket lands).
		if err := dev.Cast(g, w); err != nil {
			return nil, 0, err
		}
		if err := dev.Scale(g, g, 1/float32(b.size)); err != nil {
			return nil, 0, err
		}
		if err := dev.Cast(w, g); err != nil {
			return nil, 0, err
		}
	}
	if b.wire == comm.BFloat16 {
		return w, libnccl.Bfloat16, nil
	}
	return w, libnccl.Float16, nil
}

// Land makes the compute stream wait for the bucket's reduced event once the reduction is
// enqueued (no host wait for the reduction itself) and, for a compressed hook, widens the
// result back into the gradients on the compute stream. For a hook run in host memory it
// waits for the hook's Work and copies the bucket's pinned copy back into the device
// gradients on the compute stream.
func (b *Backend) Land(ctx context.Context, bk *ddp.Bucket, w comm.Work) error {
	if b.onHost {
		return b.fromHost(ctx, bk, w)
	}
	dw, ok := w.(nccl.DeviceWork)
	if !ok {
		return w.Wait(ctx)
	}
	dev := b.st.Device()
	if err := nccl.StreamWait(ctx, dev.Context(), dev.Stream(), dw, b.reduced[bk.Index], "reduction"); err != nil {
		return err
	}
	if b.wire == comm.Float32 {
		return nil
	}
	g, err := b.st.GradRange(bk.Lo, bk.Hi)
	if err != nil {
		return err
	}
	wv, err := b.wires.View(bk.Lo, bk.Hi-bk.Lo)
	if err != nil {
		return err
	}
	if err := dev.Cast(g, wv); err != nil {
		return fmt.Errorf("widening the reduced 16-bit values: %w", err)
	}
	return nil
}

// Note [Host hooks on the device]
//
// A hook without a ddp.HookWire recipe (commhook.PowerSGD, a HookFunc) is Go code over
// Bucket.Grad in host memory; it runs here as it is, with no device copy of its logic.
// Launch copies the bucket's device range into the bucket's pinned host buffer on the compute stream, so after
// the bucket's gradients (where the NCCL path records the ready event), waits for the copy
// and calls the hook with the DDP's group on the goroutine that drives the DDP, at the point
// of the step where the host path calls it: every rank issues the hook's collectives in the
// host path's order, SyncBatchNorm's reductions interleaved alike. The hook sees a Bucket
// with the DDP bucket's Index, Lo, Hi and Params whose Grad is the pinned copy. Land waits for
// the hook's Work and enqueues the copy of the result back into the device range on the
// compute stream, before the bucket's optimizer step (StepRange) in stream order; the next
// step's copy into the same buffer is enqueued after it on the same stream. The cost: the host
// waits for each bucket's gradients, so the compute stream's queue runs dry at each launch,
// and every bucket crosses the bus twice.

// pinLayout gives each bucket a pinned host copy of its range, freeing the previous layout's
// (once the copies from them have run).
func (b *Backend) pinLayout(buckets []*ddp.Bucket) error {
	b.freePins()
	dev := b.st.Device()
	for _, bk := range buckets {
		n := bk.Hi - bk.Lo
		p, err := dev.Pinned(4 * n)
		if err != nil {
			return fmt.Errorf("pinned host copy of %s: %w", bk, err)
		}
		b.pins = append(b.pins, p)
		b.hosted = append(b.hosted, &ddp.Bucket{Index: bk.Index, Lo: bk.Lo, Hi: bk.Hi, Grad: p.Float32s()[:n], Params: bk.Params})
	}
	return nil
}

func (b *Backend) freePins() {
	for _, p := range b.pins {
		p.Free()
	}
	b.pins, b.hosted = nil, nil
}

// toHost copies bk's device gradients into its pinned copy after the gradients, waits for
// the copy and returns the bucket over the copy.
func (b *Backend) toHost(ctx context.Context, bk *ddp.Bucket) (*ddp.Bucket, error) {
	g, err := b.st.GradRange(bk.Lo, bk.Hi)
	if err != nil {
		return nil, err
	}
	hb := b.hosted[bk.Index]
	if err := b.pins[bk.Index].CopyFrom(g); err != nil {
		return nil, fmt.Errorf("copying %s to the host: %w", bk, err)
	}
	if err := b.st.Device().Synchronize(ctx); err != nil {
		return nil, fmt.Errorf("waiting for %s's copy to the host: %w", bk, err)
	}
	return hb, nil
}

// fromHost waits for the hook's Work w and enqueues the copy of bk's reduced pinned copy
// into the device gradients.
func (b *Backend) fromHost(ctx context.Context, bk *ddp.Bucket, w comm.Work) error {
	if err := w.Wait(ctx); err != nil {
		return err
	}
	g, err := b.st.GradRange(bk.Lo, bk.Hi)
	if err != nil {
		return err
	}
	if err := b.pins[bk.Index].CopyTo(g); err != nil {
		return fmt.Errorf("copying the reduced %s back to the device: %w", bk, err)
	}
	return nil
}

// ZeroGrad zeroes the device gradients.
func (b *Backend) ZeroGrad() error { return b.st.ZeroGrad() }

// ReadParams copies the device parameters to the host's ParamSet.Data.
func (b *Backend) ReadParams(ctx context.Context) error { return b.st.ParamsToHost(ctx) }

// WriteParams brings the host's parameters and optimizer state up to date, runs fn on the
// parameters, and copies them (and the unchanged optimizer state) back to the device.
func (b *Backend) WriteParams(ctx context.Context, fn func([]float32) error) error {
	if err := b.st.ToHost(ctx); err != nil {
		return err
	}
	if err := fn(b.st.Model().Params.Data); err != nil {
		return err
	}
	return b.st.FromHost()
}

// exec is a device program as ddp's Executor.
type exec struct {
	*tape.Program
	st *tape.State
}

// Compiled is the nn program the device program was lowered from.
func (x exec) Compiled() *nn.Program { return x.CPU() }

// Update is the device state's Update.
func (x exec) Update(ctx context.Context) error { return x.st.Update(ctx) }

// Ranged is the device optimizer, stepping each bucket's range after its reduction.
func (x exec) Ranged() ddp.BucketStepper {
	if !x.st.HasOptimizer() {
		return nil
	}
	return stepper{x.st}
}

type stepper struct{ st *tape.State }

func (s stepper) BeginStep() error               { return s.st.BeginStep() }
func (s stepper) StepBucket(b *ddp.Bucket) error { return s.st.StepRange(b.Lo, b.Hi) }
func (s stepper) EndStep() error                 { return s.st.EndStep() }
