package commhook

import (
	"sync"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/ddp/internal/wire"
)

// FP16Compress is PyTorch's fp16_compress_hook: the bucket is rounded to IEEE half
// precision (round to nearest, ties to even, overflow to ±Inf), divided by the world size in
// half precision, all-reduced as 16-bit values (comm.F16: half the bytes of float32 on the
// wire; see comm's Note 16-bit reductions for how the sum rounds), and the result widened
// back into the bucket's float32 gradients. It is ddp.HookWire's comm.Float16 recipe, so a
// device backend runs the same arithmetic in device memory.
func FP16Compress() ddp.CommHook { return newCompressHook(comm.Float16) }

// BF16Compress is PyTorch's bf16_compress_hook: as FP16Compress with bfloat16 (8 bits of
// significand, float32's exponent range, so no overflow), all-reduced as comm.BF16; a
// ddp.HookWire's comm.BFloat16 recipe.
func BF16Compress() ddp.CommHook { return newCompressHook(comm.BFloat16) }

// compressHook keeps one 16-bit buffer per group and bucket index (one hook may serve several
// ranks of one process); a bucket's buffer is in use from its Reduce until its Work
// completes, and DDP does not launch that bucket again before.
type compressHook struct {
	wire.Recipe // the 16-bit type the hook reduces in
	mu          sync.Mutex
	bufs        map[bucketKey][]uint16
}

type bucketKey struct {
	g     comm.Group
	index int
}

func newCompressHook(dt comm.DType) *compressHook {
	return &compressHook{Recipe: wire.Recipe{DType: dt}, bufs: map[bucketKey][]uint16{}}
}

func (h *compressHook) buffer(g comm.Group, b *ddp.Bucket) []uint16 {
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

func (h *compressHook) Reduce(g comm.Group, b *ddp.Bucket) comm.Work {
	buf := h.buffer(g, b)
	narrow, widen, wire := simd.F32ToBF16, simd.BF16ToF32, comm.Buffer(comm.BF16(buf))
	if h.DType == comm.Float16 {
		narrow, widen, wire = simd.F32ToF16, simd.F16ToF32, comm.F16(buf)
	}
	// round(round(v)/n), as torch's grad.to(half).div_(n): b.Grad holds the rounded values
	// while they are divided (it is overwritten with the result anyway).
	narrow(buf, b.Grad)
	if g.Size() > 1 {
		widen(b.Grad, buf)
		ddp.DivideByWorld(b.Grad, g.Size())
		narrow(buf, b.Grad)
	}
	w := g.AllReduce(wire, comm.Sum)
	return Then(w, func() error {
		widen(b.Grad, buf)
		return nil
	})
}
