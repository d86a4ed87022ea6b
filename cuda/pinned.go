package cuda

import (
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/memory"
)

// Pinned is a page-locked host buffer from the device's pinned cache: copies between it and
// device memory run asynchronously at full bus speed (a data loader fills one while the
// previous batch trains).
type Pinned struct {
	d   *Device
	blk memory.Block
	n   int
}

// Pinned returns a pinned host buffer of at least bytes bytes; Free returns it to the cache.
func (d *Device) Pinned(bytes int) (*Pinned, error) {
	blk, err := d.pinned.Alloc(bytes)
	if err != nil {
		return nil, err
	}
	return &Pinned{d: d, blk: blk, n: bytes}, nil
}

// Bytes views the buffer (valid until Free).
func (p *Pinned) Bytes() []byte { return unsafe.Slice((*byte)(pinnedPtr(p.blk)), p.n) }

// Float32s views the buffer as float32s (valid until Free).
func (p *Pinned) Float32s() []float32 { return pinnedF32(p.blk, p.n/4) }

// CopyTo enqueues a copy of the buffer's first t.Len() elements into t on the device's
// stream and returns at once; do not touch the buffer until the device has run it
// (Device.Synchronize, or a later ToHost).
func (p *Pinned) CopyTo(t *Tensor) error {
	return p.d.ctx.CopyHtoDAsync(t.Ptr(), pinnedPtr(p.blk), min(p.n, t.n*t.dtype.Size()), p.d.stream)
}

// Free returns the buffer to the pinned cache.
func (p *Pinned) Free() {
	if p.blk.Ptr != 0 {
		_ = p.d.pinned.Free(p.blk)
		p.blk = memory.Block{}
	}
}
