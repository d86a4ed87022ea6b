package cuda

import (
	"fmt"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/memory"
)

// Pinned is a page-locked host buffer from the device's pinned cache: copies between it and
// device memory run asynchronously at full bus speed (a data loader fills one while the
// previous batch trains).
type Pinned struct {
	d   *Device
	blk memory.Block
	n   int
	// copied is recorded on the device's stream after each CopyTo: the buffer goes back to
	// the cache only once the copies reading it have run.
	copied driver.Event
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
// stream and returns at once; do not write the buffer until the device has run it
// (Device.Synchronize, or a later ToHost). Free waits for it.
func (p *Pinned) CopyTo(t *Tensor) error {
	if p.blk.Ptr == 0 {
		return fmt.Errorf("cuda: device %d: copy from a freed pinned buffer", p.d.ordinal)
	}
	if err := p.d.ctx.CopyHtoDAsync(t.Ptr(), pinnedPtr(p.blk), min(p.n, t.n*t.dtype.Size()), p.d.stream); err != nil {
		return err
	}
	return p.recordCopy()
}

// CopyFrom enqueues a copy of t's elements (as many as the buffer holds) into the buffer on
// the device's stream and returns at once; read the buffer only once the device has run it
// (Device.Synchronize). Free waits for it.
func (p *Pinned) CopyFrom(t *Tensor) error {
	if p.blk.Ptr == 0 {
		return fmt.Errorf("cuda: device %d: copy into a freed pinned buffer", p.d.ordinal)
	}
	if err := p.d.ctx.CopyDtoHAsync(pinnedPtr(p.blk), t.Ptr(), min(p.n, t.n*t.dtype.Size()), p.d.stream); err != nil {
		return err
	}
	return p.recordCopy()
}

// recordCopy records, after the copy just enqueued, the event Free waits for.
func (p *Pinned) recordCopy() error {
	if p.copied == 0 {
		ev, err := p.d.ctx.EventCreate(false)
		if err != nil {
			return fmt.Errorf("cuda: device %d: pinned copy's event: %w", p.d.ordinal, err)
		}
		p.copied = ev
	}
	if err := p.d.ctx.EventRecord(p.copied, p.d.stream); err != nil {
		return fmt.Errorf("cuda: device %d: pinned copy's event: %w", p.d.ordinal, err)
	}
	return nil
}

// Free waits for the copies CopyTo and CopyFrom enqueued, then returns it to the pinned
// cache, where the next Pinned may hand it out and be written at once. A buffer whose copies
// cannot be waited for (the device failed) is not reused.
func (p *Pinned) Free() {
	if p.blk.Ptr == 0 {
		return
	}
	reuse := true
	if p.copied != 0 {
		reuse = p.d.ctx.EventSynchronize(p.copied) == nil
		_ = p.d.ctx.EventDestroy(p.copied)
		p.copied = 0
	}
	if reuse {
		_ = p.d.pinned.Free(p.blk)
	}
	p.blk = memory.Block{}
}
