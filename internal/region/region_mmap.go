//go:build linux || darwin || dragonfly || freebsd || netbsd

package region

import (
	"fmt"
	"os"
	"unsafe"
)

// Mapped is true where regions are memory mappings: file regions exist, and released or
// freed pages go back to the system.
const Mapped = true

// NewAnon maps n zeroed float32 elements, private to this process, named name in errors.
// The memory costs nothing until written; its pages lie between two inaccessible guard
// pages, because the kernel merges adjacent anonymous mappings with equal protections and
// Held reads the region's own entry in /proc/self/smaps. The error names the region and
// its size in bytes.
func NewAnon(name string, n int) (*Region, error) {
	r := &Region{name: name, pageB: os.Getpagesize(), prot: protRW}
	size := (max(n*4, r.pageB) + r.pageB - 1) / r.pageB * r.pageB
	w, err := mmap(-1, 0, size+2*r.pageB, protNone, mapAnon)
	if err != nil {
		return nil, fmt.Errorf("mmap %s (%d bytes): %w", name, size, err)
	}
	b := w[r.pageB : r.pageB+size : r.pageB+size]
	if err := mprotect(b, protRW); err != nil {
		munmap(w)
		return nil, fmt.Errorf("mprotect %s (%d bytes): %w", name, size, err)
	}
	r.raw, r.whole = b, w
	r.f = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return r, nil
}

// NewZeros maps n read-only float32 zeros: reading them maps the kernel's zero page (no
// memory). Writing them faults (the process crashes), so they are for memory that must
// exist but is never written. The error names the region and its size in bytes.
func NewZeros(name string, n int) (*Region, error) {
	r := &Region{name: name, pageB: os.Getpagesize(), prot: protRead}
	size := max(n*4, r.pageB)
	b, err := mmap(-1, 0, size, protRead, mapAnon)
	if err != nil {
		return nil, fmt.Errorf("mmap %s (%d bytes): %w", name, size, err)
	}
	r.raw = b
	r.f = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return r, nil
}

// NewFile creates (or truncates) the file at path to n float32 elements (zeros) and maps it
// shared: writes reach the file (Sync waits for them), and Release drops pages from this
// process without losing them. The error names the region, the file and its size.
func NewFile(name, path string, n int) (*Region, error) {
	r := &Region{name: name, path: path, pageB: os.Getpagesize()}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	size := max(n*4, r.pageB)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: truncate %s to %d bytes: %w", name, path, size, err)
	}
	b, err := mmap(int(f.Fd()), 0, size, protRW, mapShared)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: mmap %s (%d bytes): %w", name, path, size, err)
	}
	r.raw, r.file = b, f
	r.f = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	return r, nil
}

// Resident is the number of bytes of the region in this process's memory: mincore for an
// anonymous region; for a file region the mapping's Rss in /proc/self/smaps (mincore would
// report the page cache, which holds the file whether or not this process maps it). Without
// smaps (darwin, the BSDs) a file region's is mincore's too, an upper bound. Where it
// cannot be measured (mincore fails, or smaps has no entry for the mapping) it is unknown
// and reported as 0, so that it can be added into totals.
func (r *Region) Resident() int64 {
	if r == nil || r.raw == nil {
		return 0
	}
	if r.file != nil && haveSmaps {
		return max(0, smapsRss(uintptr(unsafe.Pointer(&r.raw[0]))))
	}
	pages := (len(r.raw) + r.pageB - 1) / r.pageB
	vec := make([]byte, pages)
	if mincore(r.raw, vec) != nil {
		return 0
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n++
		}
	}
	return n * int64(r.pageB)
}

// Sync writes a file region's dirty pages back to its file and waits (msync MS_SYNC); it
// does nothing to an anonymous region. The error names the region and its file.
func (r *Region) Sync() error {
	if r == nil || r.file == nil || r.raw == nil {
		return nil
	}
	if err := msync(r.raw); err != nil {
		return fmt.Errorf("msync %s: %w", r, err)
	}
	return nil
}

// Close unmaps the region and closes its file (without Sync: the kernel still writes the
// file's dirty pages back, but Close does not wait for them). Floats must not be used
// afterwards; Close of a closed region does nothing. The error names the region.
func (r *Region) Close() error {
	if r == nil || r.raw == nil {
		return nil
	}
	name := r.String()
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
		return fmt.Errorf("unmap %s: %w", name, err)
	}
	return nil
}

// readOnly reports a region mapped without write permission (NewZeros), whose elements
// Release must not clear.
func (r *Region) readOnly() bool { return r.prot == protRead }
