package ddp

import (
	"context"
	"math"

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
// precision (round to nearest even, overflow to ±Inf), divided by the world size in half
// precision, all-reduced, and the result rounded to half precision again before it is
// written back. comm has no 16-bit transport, so the wire carries the rounded values as
// float32: this reproduces the numerics of the compression, not its bandwidth saving, and
// the sum itself is exact in float32 where a 16-bit ring would round every partial sum.
func FP16CompressHook() CommHook { return compressHook(roundF16) }

// BF16CompressHook is PyTorch's bf16_compress_hook, emulated like FP16CompressHook with
// bfloat16 rounding (8 bits of significand, float32's exponent range).
func BF16CompressHook() CommHook { return compressHook(roundBF16) }

func compressHook(round func(float32) float32) CommHook {
	return HookFunc(func(g comm.Group, b *Bucket) comm.Work {
		n := float32(g.Size())
		for i, v := range b.Grad {
			b.Grad[i] = round(round(v) / n)
		}
		w := g.AllReduce(comm.F32(b.Grad), comm.Sum)
		return Then(w, func() error {
			for i, v := range b.Grad {
				b.Grad[i] = round(v)
			}
			return nil
		})
	})
}

// Then returns a Work that completes after w has completed and then fn has run (on its own
// goroutine, so it overlaps whatever the caller does meanwhile). fn does not run when w
// fails; the Work then reports w's error. Hooks use it to decompress a result.
func Then(w comm.Work, fn func() error) comm.Work {
	t := &thenWork{inner: w, done: make(chan struct{})}
	go func() {
		<-w.Done()
		t.err = w.Wait(context.Background())
		if t.err == nil {
			t.err = fn()
		}
		close(t.done)
	}()
	return t
}

type thenWork struct {
	inner comm.Work
	done  chan struct{}
	err   error
}

func (t *thenWork) Done() <-chan struct{} { return t.done }

func (t *thenWork) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
	}
	// Abort the collective (the buffers are in use) and wait for the goroutine to finish.
	_ = t.inner.Wait(ctx)
	<-t.done
	return t.err
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
func roundBF16(x float32) float32 {
	b := math.Float32bits(x)
	if b&0x7f800000 == 0x7f800000 {
		return x // Inf or NaN
	}
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b & 0xffff0000)
}

// roundF16 rounds x to the nearest IEEE binary16 value (ties to even), with subnormals,
// and overflow to ±Inf.
func roundF16(x float32) float32 {
	if x != x || x == 0 {
		return x
	}
	a := math.Abs(float64(x))
	if math.IsInf(a, 0) {
		return x
	}
	_, exp := math.Frexp(a) // a in [2^(exp-1), 2^exp)
	q := math.Ldexp(1, exp-11)
	if exp-1 < -14 {
		q = math.Ldexp(1, -24)
	}
	r := math.RoundToEven(a/q) * q
	if r > 65504 {
		r = math.Inf(1)
	}
	return float32(math.Copysign(r, float64(x)))
}
