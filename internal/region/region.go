// Package region allocates float32 memory outside the Go heap, whose pages can be given
// back to the kernel while the memory stays mapped: anonymous regions (zeros that cost
// nothing until written) and file regions (a shared mapping of a file). ZeRO-3 keeps its
// gathered parameters, reduce-scatter buffers and disk-offloaded state in them.
package region

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
)

// Region is float32 memory outside the Go heap: an anonymous private mapping (zero-filled,
// released with MADV_DONTNEED, or handed back lazily with MADV_FREE) or a shared mapping of
// a file (whose pages the kernel writes back; releasing only drops them from this process).
// Floats is the memory; the constructors say what it holds at first.
//
// Concurrency: Release and Free of disjoint element ranges, Held, Resident and WillNeed
// may run concurrently with each other and with reads and writes of elements outside the
// range being released or freed (they touch only pages that lie wholly inside that range,
// and clear only elements inside it). Close, ReleaseAll, FreeAll and Sync must not run
// concurrently with any other use of the region. Every method is a no-op on a nil *Region
// and on a closed one (Floats is nil, Held and Resident report 0, the rest return nil), so
// an optional region need not be checked by its owner, and a use after Close does nothing.
// Release and Free of a range that is reversed (lo > hi) or outside [0, n) fail with an
// error naming the region and the range.
//
// Errors name the operation and the region as String does (its name and its size or
// file), and wrap the system's error where there is one; they carry no package prefix, so
// the caller adds its own.
//
// Note [Two ways to give anonymous pages back]: a page released with MADV_DONTNEED is
// zero-filled by a page fault the next time it is written, and a ZeRO-3 step writes every
// gathered parameter twice and every gradient once, so on resnet50 releasing with DONTNEED
// cost about 106,000 faults (≈0.3 s) per step. MADV_FREE leaves the page mapped: the kernel
// takes it when it needs memory, without writing it anywhere, and until then writing it
// again costs no fault. A step's regions are freed that way (Free); what must read as zeros
// afterwards is released with DONTNEED (Release).
//
// That is Linux (region_linux.go). region_bsd.go maps the same way on darwin and the BSDs,
// whose MADV_DONTNEED keeps a page's contents, so an anonymous range is zeroed there by
// mapping fresh pages over it. Elsewhere (windows) region_other.go puts anonymous regions
// on the Go heap and has no file regions.
type Region struct {
	name  string
	raw   []byte
	whole []byte // the mapping with its guard pages (NewAnon), nil: raw
	f     []float32
	file  *os.File
	path  string
	pageB int
	prot  int // an anonymous mapping's protection (region_bsd.go remaps with it)
}

// String names the region in errors: "name (N bytes)" for an anonymous region (N the size
// of its memory, whole pages), "name (path)" for a file region. It is "nil region" for a
// nil one and "name (closed)" after Close.
func (r *Region) String() string {
	switch {
	case r == nil:
		return "nil region"
	case r.file != nil:
		return fmt.Sprintf("%s (%s)", r.name, r.path)
	case r.raw == nil:
		return r.name + " (closed)"
	}
	return fmt.Sprintf("%s (%d bytes)", r.name, len(r.raw))
}

// checkRange is nil where [lo, hi) is a range of the region's elements (lo <= hi, both
// in [0, n]), and otherwise an error naming op, the region and the range.
func (r *Region) checkRange(op string, lo, hi int) error {
	if lo < 0 || hi < lo || hi > len(r.f) {
		return fmt.Errorf("%s %s: elements [%d, %d) are not a range of its %d elements: pass 0 <= lo <= hi <= %d",
			op, r, lo, hi, len(r.f), len(r.f))
	}
	return nil
}

// Floats is the region's n elements (n as given to the constructor). The slice aliases
// the region's memory: it is valid until Close and must not be used afterwards. It is nil
// for a nil region.
func (r *Region) Floats() []float32 {
	if r == nil {
		return nil
	}
	return r.f
}

// Release gives the pages of elements [lo, hi) back to the kernel. An anonymous region reads
// as zeros in [lo, hi) afterwards (elements on the partial pages at the ends are cleared
// explicitly) and keeps every element outside it; a file region keeps all its contents, in
// the file and the page cache, and only this process's mapping of the pages goes. A
// read-only region (NewZeros) is never written: only the pages wholly inside [lo, hi) are
// given back, and its elements read as zeros throughout. Its error names the region and
// is that of the system call, or says that [lo, hi) is not a range of the region.
func (r *Region) Release(lo, hi int) error {
	if r == nil || r.raw == nil {
		return nil
	}
	if err := r.checkRange("release", lo, hi); err != nil || lo == hi {
		return err
	}
	a, z := lo*4, hi*4
	pa := (a + r.pageB - 1) / r.pageB * r.pageB
	pz := z / r.pageB * r.pageB
	if r.file == nil && !r.readOnly() {
		if pa >= pz {
			clear(r.f[lo:hi])
			return nil
		}
		clear(r.f[lo : pa/4])
		clear(r.f[pz/4 : hi])
	} else if pa >= pz {
		return nil
	}
	if err := r.discard(r.raw[pa:pz]); err != nil {
		return fmt.Errorf("release %s: %w", r, err)
	}
	return nil
}

// Free hands the pages that lie wholly inside elements [lo, hi) of an anonymous region back
// to the kernel lazily (MADV_FREE, see the Note on Region): the contents of [lo, hi) are
// undefined afterwards (the old values or zeros) until written; elements outside it are
// kept. Use it for memory the owner overwrites before reading; Release for memory that
// must read as zeros. A file region is released as by Release. Its error names the region
// and is that of the system call, or says that [lo, hi) is not a range of the region.
func (r *Region) Free(lo, hi int) error {
	if r == nil || r.raw == nil {
		return nil
	}
	if err := r.checkRange("free", lo, hi); err != nil || lo == hi {
		return err
	}
	if r.file != nil {
		return r.Release(lo, hi)
	}
	pa := (lo*4 + r.pageB - 1) / r.pageB * r.pageB
	pz := hi * 4 / r.pageB * r.pageB
	if pa >= pz {
		return nil
	}
	if err := madviseFree(r.raw[pa:pz]); err != nil {
		return fmt.Errorf("free %s: %w", r, err)
	}
	return nil
}

// FreeAll frees the whole region (see Free): its contents are undefined afterwards.
func (r *Region) FreeAll() error {
	if r == nil || r.raw == nil {
		return nil
	}
	return r.Free(0, len(r.f))
}

// DropPages gives the pages that lie wholly inside f back to the kernel lazily (MADV_FREE,
// see Free): their contents are undefined afterwards; f's elements on partial pages at its
// ends are kept. f need not be a region (a slice of at least two pages of Go heap memory
// is dropped too; a shorter one is left as it is), but it must be memory without pointers
// whose contents its owner will overwrite before reading (a tape register). Errors are
// ignored: dropping is advice, and f's contents are undefined either way.
func DropPages(f []float32) {
	pg := uintptr(os.Getpagesize())
	if uintptr(len(f))*4 < 2*pg {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
	a := uintptr(unsafe.Pointer(&f[0]))
	lo := (a+pg-1)/pg*pg - a
	hi := (a+uintptr(len(b)))/pg*pg - a
	if lo < hi {
		_ = madviseFree(b[lo:hi])
	}
}

// ReleaseAll releases the whole region (see Release): an anonymous region reads as zeros
// afterwards, a file region keeps its contents in the file.
func (r *Region) ReleaseAll() error {
	if r == nil || r.raw == nil {
		return nil
	}
	if err := r.discard(r.raw); err != nil {
		return fmt.Errorf("release %s: %w", r, err)
	}
	return nil
}

// WillNeed asks the kernel to start reading a file region in (asynchronous readahead), so
// that the next reads fault less; it does nothing to an anonymous region and returns
// before the pages are in.
func (r *Region) WillNeed() {
	if r != nil && r.file != nil && r.raw != nil {
		madviseWillNeed(r.raw)
	}
}

// Held is the number of bytes of an anonymous region that this process holds and the
// kernel cannot take back without asking: the mapping's Rss minus its LazyFree in
// /proc/self/smaps (pages freed with MADV_FREE and not written since are the kernel's to
// take). A file region's is its resident bytes, and so is an anonymous region's where
// there is no /proc/self/smaps.
//
// The kernel marks pages lazily free in per-CPU batches (a pagevec of 15 pages): up to 15
// pages per CPU freed last can still count as Rss without LazyFree when smaps is read. That
// much is not counted as held, so that a region released in full reads as 0.
//
// Held reads /proc/self/smaps: it costs a pass over this process's mappings, for reports
// rather than hot paths.
func (r *Region) Held() int64 {
	if r == nil || r.raw == nil {
		return 0
	}
	if r.file != nil {
		return r.Resident()
	}
	v := smapsFields(uintptr(unsafe.Pointer(&r.raw[0])), "Rss", "LazyFree")
	if v[0] < 0 {
		return r.Resident()
	}
	return max(0, v[0]-max(v[1], 0)-lazyFreeBatch)
}

// lazyFreeBatch is the most the kernel's per-CPU batching of MADV_FREE can leave unaccounted.
var lazyFreeBatch = int64(15 * runtime.NumCPU() * os.Getpagesize())

// smapsRss is the Rss of the mapping of this process that starts at addr, or -1.
func smapsRss(addr uintptr) int64 { return smapsFields(addr, "Rss")[0] }

// smapsFields reads "kB" fields of the mapping of this process that starts at addr from
// /proc/self/smaps, in bytes; -1 for each one not found (all of them where there is no
// /proc/self/smaps).
func smapsFields(addr uintptr, fields ...string) []int64 {
	out := make([]int64, len(fields))
	for i := range out {
		out[i] = -1
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, seen := false, false
	for sc.Scan() {
		line := sc.Text()
		if start, _, ok := strings.Cut(line, "-"); ok && !strings.Contains(start, " ") && !strings.HasSuffix(start, ":") {
			if seen {
				break
			}
			a, err := strconv.ParseUint(start, 16, 64)
			in = err == nil && uintptr(a) == addr
			seen = in
			continue
		}
		if !in {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for i, name := range fields {
			if k == name {
				if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil {
					out[i] = kb * 1024
				}
			}
		}
	}
	return out
}
