package nccl

import (
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

func driverPtr(n int) driver.DevPtr { return driver.DevPtr(n) }

// ensure grows the pinned host and device staging buffers to at least n bytes (doubling, so
// a training loop settles after its first step).
func (w *worker) ensure(n int) error {
	if n <= w.devBytes {
		return nil
	}
	size := max(n, 2*w.devBytes, 1<<16)
	w.freeStaging()
	c := w.g.ctx
	d, err := c.MemAlloc(size)
	if err != nil {
		return err
	}
	h, err := c.HostAlloc(size)
	if err != nil {
		_ = c.MemFree(d)
		return err
	}
	w.dev, w.devBytes, w.hostPtr = d, size, h
	w.host = unsafe.Slice((*byte)(h), size)
	return nil
}

func (w *worker) freeStaging() {
	if w.devBytes == 0 {
		return
	}
	c := w.g.ctx
	_ = c.MemFree(w.dev)
	_ = c.HostFree(w.hostPtr)
	w.dev, w.devBytes, w.hostPtr, w.host = 0, 0, nil, nil
}
