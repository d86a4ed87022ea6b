//go:build linux || darwin || dragonfly || freebsd || netbsd

package zero

import (
	"fmt"
	"os"
	"unsafe"
)

// newAnon maps n zeroed float32 elements between two inaccessible guard pages: the kernel
// merges adjacent anonymous mappings with equal protections, and held reads the region's
// own entry in /proc/self/smaps.
func newAnon(name string, n int) (*region, error) {
	r := &region{name: name, pageB: os.Getpagesize(), prot: protRW}
	size := (max(n*4, r.pageB) + r.pageB - 1) / r.pageB * r.pageB
	w, err := mmap(-1, 0, size+2*r.pageB, protNone, mapAnon)
	if err != nil {
		return nil, fmt.Errorf("zero: mmap %s (%d bytes): %w", name, size, err)
	}
	b := w[r.pageB : r.pageB+size : r.pageB+size]
	if err := mprotect(b, protRW); err != nil {
		munmap(w)
		return nil, fmt.Errorf("zero: mprotect %s (%d bytes): %w", name, size, err)
	}
	r.raw, r.whole = b, w
	r.f = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return r, nil
}

// newZeros maps n read-only float32 zeros: reading them maps the kernel's zero page (no
// memory), writing them faults.
func newZeros(name string, n int) (*region, error) {
	r := &region{name: name, pageB: os.Getpagesize(), prot: protRead}
	size := max(n*4, r.pageB)
	b, err := mmap(-1, 0, size, protRead, mapAnon)
	if err != nil {
		return nil, fmt.Errorf("zero: mmap %s (%d bytes): %w", name, size, err)
	}
	r.raw = b
	r.f = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return r, nil
}

// newFile creates (or truncates) path to n float32 elements and maps it shared.
func newFile(name, path string, n int) (*region, error) {
	r := &region{name: name, path: path, pageB: os.Getpagesize()}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("zero: %s: %w", name, err)
	}
	size := max(n*4, r.pageB)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("zero: %s: truncate %s to %d bytes: %w", name, path, size, err)
	}
	b, err := mmap(int(f.Fd()), 0, size, protRW, mapShared)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("zero: %s: mmap %s: %w", name, path, err)
	}
	r.raw, r.file = b, f
	r.f = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return r, nil
}

// resident is the number of bytes of the region in this process's memory: mincore for an
// anonymous region; for a file region the mapping's Rss in /proc/self/smaps (mincore would
// report the page cache, which holds the file whether or not this process maps it). Without
// smaps (darwin, the BSDs) a file region's is mincore's too, an upper bound.
func (r *region) resident() int64 {
	if r == nil || r.raw == nil {
		return 0
	}
	if r.file != nil && haveSmaps {
		return smapsRss(uintptr(unsafe.Pointer(&r.raw[0])))
	}
	pages := (len(r.raw) + r.pageB - 1) / r.pageB
	vec := make([]byte, pages)
	if mincore(r.raw, vec) != nil {
		return -1
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n++
		}
	}
	return n * int64(r.pageB)
}

// sync writes a file region's dirty pages back to its file.
func (r *region) sync() error {
	if r == nil || r.file == nil {
		return nil
	}
	if err := msync(r.raw); err != nil {
		return fmt.Errorf("zero: msync %s (%s): %w", r.name, r.path, err)
	}
	return nil
}

// close unmaps the region and closes its file.
func (r *region) close() error {
	if r == nil || r.raw == nil {
		return nil
	}
	m := r.raw
	if r.whole != nil {
		m = r.whole
	}
	err := munmap(m)
	r.raw, r.whole, r.f = nil, nil, nil
	if r.file != nil {
		if cerr := r.file.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("zero: unmap %s: %w", r.name, err)
	}
	return nil
}
