//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd

package zero

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"
)

// Without mmap (windows, and the systems region_mmap.go does not list) an anonymous region
// is Go heap memory: a zeroed slice that release clears, and that free, dropPages and
// willNeed leave as it is. The contents promised hold; the memory is not given back, so
// resident and held count every byte, and Memory's TransientResidentBytes is not 0 between
// steps. File regions (disk offload) would have to live in memory too, which defeats
// them, so newFile fails.

// newAnon allocates n zeroed float32 elements on the Go heap.
func newAnon(name string, n int) (*region, error) {
	r := &region{name: name, pageB: os.Getpagesize()}
	r.f = make([]float32, max(n, 1))[:n]
	r.raw = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(r.f))), 4*cap(r.f))
	return r, nil
}

// newZeros allocates n float32 zeros on the Go heap. Nothing writes them (writing them
// does not fault here).
func newZeros(name string, n int) (*region, error) { return newAnon(name, n) }

// newFile fails: a file region needs a shared file mapping.
func newFile(name, path string, _ int) (*region, error) {
	return nil, fmt.Errorf("zero: %s: disk offload region %s: mmap is not supported on %s; use OffloadCPU: %w",
		name, path, runtime.GOOS, errors.ErrUnsupported)
}

// discard clears b: a heap region reads as zeros after release, as a mapping would.
func (r *region) discard(b []byte) error { clear(b); return nil }

// madviseFree does nothing: free leaves the contents undefined, and the old values are.
func madviseFree([]byte) error { return nil }

func madviseWillNeed([]byte) {}

// resident is the region's size: heap memory is never given back.
func (r *region) resident() int64 {
	if r == nil {
		return 0
	}
	return int64(len(r.raw))
}

// sync does nothing: there are no file regions.
func (r *region) sync() error { return nil }

// close drops the region's memory for the garbage collector.
func (r *region) close() error {
	if r != nil {
		r.raw, r.f = nil, nil
	}
	return nil
}
