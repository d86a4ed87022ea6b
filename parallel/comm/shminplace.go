package comm

import (
	"unsafe"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/sse2"
)

// InPlace reports whether an AllReduce of buf over g takes the zero-copy path: buf lies in
// memory from AllocFloat32 that the ranks share, the transport reduces such buffers in place
// (the shared-memory transport, world 2 or more, not hierarchical), and buf is above the
// small-message size. Every rank gets the same answer for the same sub-slice of such a
// buffer. An Avg on that path divides each block of the result while it is in the cache, so
// the division costs no pass over buf of its own, unlike a division before the all-reduce or
// Avg on the other paths (which divide the whole buffer after it).
func InPlace(g Group, buf []float32) bool {
	gg, ok := g.(*group)
	if !ok || gg.size < 2 || gg.hier != nil || len(buf) < gg.size || 4*len(buf)*(gg.size-1) <= gg.cfg.smallBytes {
		return false
	}
	t, ok := gg.t.(inPlaceTransport)
	return ok && t.inPlace(unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 4*len(buf)))
}

// inPlaceTransport is a transport that reduces buffers of shared memory in place (shm).
type inPlaceTransport interface {
	// inPlace reports whether b lies in a region its peers map.
	inPlace(b []byte) bool
}

// zeroCopyDivides reports whether the zero-copy all-reduce applies Avg's division itself,
// block by block (float32 only); run then skips the division of the whole buffer.
func zeroCopyDivides(dt DType) bool { return dt == Float32 }

// divideBlock divides the float32s of b by n, bit for bit as divide does: dividing by a
// power of two is multiplying by its exact reciprocal (subnormals included). That case runs
// SSE2 assembly, not a cgo kernel: the zero-copy all-reduce calls it once per 64 KiB block,
// and with GOMAXPROCS=1 a cgo call in a communication goroutine often lost its P to the
// compute (Go traces of bench/ddp: ~500 hand-offs in 20 steps), stretching the all-reduce.
func divideBlock(b []byte, n int) {
	x := asSlice[float32](b)
	if n&(n-1) == 0 {
		s := 1 / float32(n)
		if simd.On() {
			x = x[sse2.ScaleF32(x, s):]
		}
		for i := range x {
			x[i] *= s
		}
		return
	}
	simd.Div(x, float32(n))
}
