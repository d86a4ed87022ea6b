package ddp

import (
	"context"
	"errors"
	"sync"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// CommHook reduces one bucket of gradients over the group (PyTorch's communication hook).
// Reduce is called on the backward goroutine as soon as the bucket is ready, in bucket
// order on every rank; it must start the reduction and return at once. When the returned
// Work completes without error, b.Grad must hold the average of the ranks' gradients. A
// hook must issue the same collectives on every rank, and must not touch b.Grad after its
// Work completes.
type CommHook interface {
	Reduce(g comm.Group, b *Bucket) comm.Work
}

// HookFunc adapts a function to CommHook.
type HookFunc func(g comm.Group, b *Bucket) comm.Work

// Reduce calls f.
func (f HookFunc) Reduce(g comm.Group, b *Bucket) comm.Work { return f(g, b) }

// AllReduceHook is the default hook, PyTorch's allreduce_hook: divide by the world size,
// then all-reduce with Sum.
//
// Inside DDP the division does not take a pass of its own over the bucket: each parameter's
// gradient is divided the moment it is ready, while it is still in the cache, and the bucket
// is then all-reduced as it is. The numbers are the same.
func AllReduceHook() CommHook { return allReduceHook{} }

type allReduceHook struct{}

func (allReduceHook) Reduce(g comm.Group, b *Bucket) comm.Work {
	scale(b.Grad, g.Size())
	return g.AllReduce(comm.F32(b.Grad), comm.Sum)
}

// FP16CompressHook is PyTorch's fp16_compress_hook: the bucket is rounded to IEEE half
// precision (round to nearest, ties to even, overflow to ±Inf), divided by the world size in
// half precision, all-reduced as 16-bit values (comm.F16: half the bytes of float32 on the
// wire; see comm's Note 16-bit reductions for how the sum rounds), and the result widened
// back into the bucket's float32 gradients.
func FP16CompressHook() CommHook { return newCompressHook(comm.Float16) }

// BF16CompressHook is PyTorch's bf16_compress_hook: as FP16CompressHook with bfloat16 (8 bits
// of significand, float32's exponent range, so no overflow), all-reduced as comm.BF16.
func BF16CompressHook() CommHook { return newCompressHook(comm.BFloat16) }

// Wire reports the element type h reduces a bucket in, for a backend that cannot run a
// hook's Go code over its memory: comm.Float32 for AllReduceHook (divide, then sum),
// comm.Float16 and comm.BFloat16 for FP16CompressHook and BF16CompressHook (round, divide in
// the 16-bit type, sum, widen). ok is false for every other hook (PowerSGDHook, a
// HookFunc): those read and write Bucket.Grad in host memory, so a device backend runs them
// on a host copy of the bucket (cuda/devddp's Note [Host hooks on the device]).
func Wire(h CommHook) (dt comm.DType, ok bool) {
	switch h := h.(type) {
	case allReduceHook:
		return comm.Float32, true
	case *compressHook:
		return h.dt, true
	}
	return 0, false
}

// compressHook keeps one 16-bit buffer per group and bucket index (one hook may serve several
// ranks of one process); a bucket's buffer is in use from its Reduce until its Work
// completes, and DDP does not launch that bucket again before.
type compressHook struct {
	dt   comm.DType
	mu   sync.Mutex
	bufs map[bucketKey][]uint16
}

type bucketKey struct {
	g     comm.Group
	index int
}

func newCompressHook(dt comm.DType) *compressHook {
	return &compressHook{dt: dt, bufs: map[bucketKey][]uint16{}}
}

func (h *compressHook) buffer(g comm.Group, b *Bucket) []uint16 {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := bucketKey{g, b.Index}
	buf := h.bufs[k]
	if len(buf) != len(b.Grad) {
		buf = make([]uint16, len(b.Grad))
		h.bufs[k] = buf
	}
	return buf
}

func (h *compressHook) Reduce(g comm.Group, b *Bucket) comm.Work {
	buf := h.buffer(g, b)
	narrow, widen, wire := simd.F32ToBF16, simd.BF16ToF32, comm.Buffer(comm.BF16(buf))
	if h.dt == comm.Float16 {
		narrow, widen, wire = simd.F32ToF16, simd.F16ToF32, comm.F16(buf)
	}
	// round(round(v)/n), as torch's grad.to(half).div_(n): b.Grad holds the rounded values
	// while they are divided (it is overwritten with the result anyway).
	narrow(buf, b.Grad)
	if g.Size() > 1 {
		widen(b.Grad, buf)
		scale(b.Grad, g.Size())
		narrow(buf, b.Grad)
	}
	w := g.AllReduce(wire, comm.Sum)
	return Then(w, func() error {
		widen(b.Grad, buf)
		return nil
	})
}

// Then returns a Work that completes after w has completed and then fn has run (on its own
// goroutine, so it overlaps whatever the caller does meanwhile). fn does not run when w
// fails; the Work then reports w's error. Hooks use it to decompress a result.
func Then(w comm.Work, fn func() error) comm.Work {
	return chain(func(t *chainWork) error {
		if err := t.track(w).Wait(context.Background()); err != nil {
			return err
		}
		return fn()
	})
}

// chainWork is the Work of a goroutine that runs collectives one after the other and
// computes between them (Then's fn, PowerSGD's rounds): it completes when the goroutine
// returns, with its error.
type chainWork struct {
	done chan struct{}
	err  error
	mu   sync.Mutex
	cur  comm.Work // the collective in flight, for Wait to abort
}

// chain runs fn on a goroutine of its own and returns its Work; fn tracks each collective
// it issues.
func chain(fn func(*chainWork) error) *chainWork {
	w := &chainWork{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = fn(w)
	}()
	return w
}

// track makes c the collective Wait aborts, and returns it.
func (w *chainWork) track(c comm.Work) comm.Work {
	w.mu.Lock()
	w.cur = c
	w.mu.Unlock()
	return c
}

func (w *chainWork) Done() <-chan struct{} { return w.done }

// Wait waits for the goroutine; when ctx ends first it aborts the collective in flight (the
// buffers are in use) and waits for the goroutine to stop.
func (w *chainWork) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
	}
	w.mu.Lock()
	c := w.cur
	w.mu.Unlock()
	if c != nil {
		_ = c.Wait(ctx)
	}
	<-w.done
	if w.err == nil {
		return nil
	}
	return errors.Join(w.err, ctx.Err())
}

// failedWork is a Work that has already failed.
type failedWork struct {
	err  error
	done chan struct{}
}

func failed(err error) comm.Work {
	w := &failedWork{err: err, done: make(chan struct{})}
	close(w.done)
	return w
}

func (w *failedWork) Done() <-chan struct{}      { return w.done }
func (w *failedWork) Wait(context.Context) error { return w.err }

func scale(x []float32, n int) {
	if n == 1 {
		return
	}
	if n&(n-1) == 0 {
		// Dividing by a power of two is multiplying by its exact reciprocal (same result,
		// subnormals included), and multiplication is several times cheaper.
		simd.Scale(x, 1/float32(n))
		return
	}
	simd.Div(x, float32(n))
}

// roundBF16 rounds x to the nearest bfloat16 (ties to even), keeping NaN.
func roundBF16(x float32) float32 { return simd.BF16ToF32One(simd.BF16FromF32(x)) }

// roundF16 rounds x to the nearest IEEE binary16 value (ties to even), with subnormals,
// and overflow to ±Inf.
func roundF16(x float32) float32 { return simd.F16ToF32One(simd.F16FromF32(x)) }
