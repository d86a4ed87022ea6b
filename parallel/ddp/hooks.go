package ddp

import (
	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp/internal/wire"
)

// CommHook reduces one bucket of gradients over the group (PyTorch's communication hook).
// Reduce is called on the backward goroutine as soon as the bucket is ready, in bucket
// order on every rank; it must start the reduction and return at once. When the returned
// Work completes without error, b.Grad must hold the average of the ranks' gradients. A
// hook must issue the same collectives on every rank, and must not touch b.Grad after its
// Work completes.
//
// AllReduceHook is the default; package commhook holds the compressing hooks (fp16, bf16,
// PowerSGD) and commhook.Then, which chains a hook's own work after a collective.
type CommHook interface {
	Reduce(g comm.Group, b *Bucket) comm.Work
}

// HookWire reports whether h is one of the hooks whose reduction is a fixed recipe, which a
// backend may run over its own memory instead of calling Reduce, and the element type the
// bucket travels in:
//
//   - comm.Float32 (AllReduceHook): divide each gradient by the world size, then all-reduce
//     with Sum. DDP then divides each gradient the moment it is ready and all-reduces the
//     bucket as it is (the host) or in device memory (a device backend).
//   - comm.Float16, comm.BFloat16 (commhook.FP16Compress, commhook.BF16Compress): round the
//     bucket to the 16-bit type (round to nearest, ties to even), divide it by the world size
//     and round again, all-reduce the 16-bit values with Sum, and widen the result back into
//     the bucket.
//
// Only those hooks are: the mark cannot be given to a hook outside ddp and commhook, so any
// other hook (commhook.PowerSGD, a HookFunc, a user's type, a wrapper around one of the
// three) has its Reduce called, as Go code over Bucket.Grad in host memory; a device backend
// runs it on a host copy of the bucket (cuda/devddp's Note [Host hooks on the device]).
func HookWire(h CommHook) (comm.DType, bool) {
	dt, ok := wire.Of(h)
	if !ok || (dt != comm.Float32 && dt != comm.Float16 && dt != comm.BFloat16) {
		return 0, false
	}
	return dt, true
}

// HookFunc adapts a function to CommHook.
type HookFunc func(g comm.Group, b *Bucket) comm.Work

// Reduce calls f.
func (f HookFunc) Reduce(g comm.Group, b *Bucket) comm.Work { return f(g, b) }

// AllReduceHook is the default hook, PyTorch's allreduce_hook: divide by the world size,
// then all-reduce with Sum: the comm.Float32 recipe of HookWire.
func AllReduceHook() CommHook { return allReduceHook{wire.Recipe{DType: comm.Float32}} }

type allReduceHook struct{ wire.Recipe }

func (allReduceHook) Reduce(g comm.Group, b *Bucket) comm.Work {
	DivideByWorld(b.Grad, g.Size())
	return g.AllReduce(comm.F32(b.Grad), comm.Sum)
}

// plainAllReduce reports whether h reduces as AllReduceHook does (HookWire's comm.Float32),
// so that DDP may divide each gradient when it is ready and all-reduce the bucket itself.
func plainAllReduce(h CommHook) bool {
	dt, ok := HookWire(h)
	return ok && dt == comm.Float32
}

// DivideByWorld divides x in place by the world size n (n >= 1), as the default hook does: for a
// power of two it multiplies by the exact reciprocal (the same bits, subnormals included,
// and several times cheaper); otherwise it divides. Hooks that average call it so that their
// division is the default's, bit for bit.
func DivideByWorld(x []float32, n int) {
	if n == 1 {
		return
	}
	if n&(n-1) == 0 {
		simd.Scale(x, 1/float32(n))
		return
	}
	simd.Div(x, float32(n))
}
