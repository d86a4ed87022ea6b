//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd

package region

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"
)

// Mapped is false here: regions live on the Go heap, NewFile fails with
// errors.ErrUnsupported, and Release and Free keep the memory.
const Mapped = false

// Without mmap (windows, and the systems region_mmap.go does not list) an anonymous region
// is Go heap memory: a zeroed slice that Release clears, and that Free, DropPages and
// WillNeed leave as it is. The contents promised hold; the memory is not given back, so
// Resident and Held count every byte (and ZeRO-3's Memory.TransientResidentBytes is not 0
// between steps). File regions (disk offload) would have to live in memory too, which
// defeats them, so NewFile fails.

// NewAnon allocates n zeroed float32 elements on the Go heap, named name (see Region). It
// does not fail here.
func NewAnon(name string, n int) (*Region, error) {
	r := &Region{name: name, pageB: os.Getpagesize()}
	r.f = make([]float32, max(n, 1))[:n]
	r.raw = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(r.f))), 4*cap(r.f))
	return r, nil
}

// NewZeros allocates n float32 zeros on the Go heap, for memory that must exist but is
// never written (writing them does not fault here, as it does where they are mapped).
func NewZeros(name string, n int) (*Region, error) { return NewAnon(name, n) }

// NewFile fails with an error wrapping errors.ErrUnsupported: a file region needs a
// shared file mapping. The error names the region and the file.
func NewFile(name, path string, _ int) (*Region, error) {
	return nil, fmt.Errorf("%s: file region %s: mmap is not supported on %s: %w",
		name, path, runtime.GOOS, errors.ErrUnsupported)
}

// discard clears b: a heap region reads as zeros after Release, as a mapping would.
func (r *Region) discard(b []byte) error { clear(b); return nil }

// madviseFree does nothing: Free leaves the contents undefined, and the old values are.
func madviseFree([]byte) error { return nil }

func madviseWillNeed([]byte) {}

// Resident is the region's size: heap memory is never given back.
func (r *Region) Resident() int64 {
	if r == nil {
		return 0
	}
	return int64(len(r.raw))
}

// Sync does nothing: there are no file regions.
func (r *Region) Sync() error { return nil }

// Close drops the region's memory for the garbage collector.
func (r *Region) Close() error {
	if r != nil {
		r.raw, r.f = nil, nil
	}
	return nil
}

// readOnly is false: heap regions, NewZeros's included, are writable.
func (r *Region) readOnly() bool { return false }
