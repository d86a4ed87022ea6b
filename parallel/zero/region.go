package zero

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
)

// region is float32 memory outside the Go heap: an anonymous private mapping (zero-filled,
// released with MADV_DONTNEED, or handed back lazily with MADV_FREE) or a shared mapping of
// a file (whose pages the kernel writes back; releasing only drops them from this process).
//
// Why two ways to give anonymous pages back: a page released with MADV_DONTNEED is
// zero-filled by a page fault the next time it is written, and a step writes every gathered
// parameter twice and every gradient once, so on resnet50 releasing with DONTNEED cost
// about 106,000 faults (≈0.3 s) per step. MADV_FREE leaves the page mapped: the kernel
// takes it when it needs memory, without writing it anywhere, and until then writing it
// again costs no fault. The step's regions are freed that way; what must read as zeros
// afterwards is released with DONTNEED.
//
// That is Linux (region_linux.go). region_bsd.go maps the same way on darwin and the BSDs,
// whose MADV_DONTNEED keeps a page's contents, so an anonymous range is zeroed there by
// mapping fresh pages over it. Elsewhere (windows) region_other.go puts anonymous regions
// on the Go heap and has no file regions.
type region struct {
	name  string
	raw   []byte
	whole []byte // the mapping with its guard pages (newAnon), nil: raw
	f     []float32
	file  *os.File
	path  string
	pageB int
	prot  int // an anonymous mapping's protection (region_bsd.go remaps with it)
}

// newPlaceholder maps n writable float32 zeros: reading them maps the kernel's zero page
// (no memory); a page written costs memory until released.
func newPlaceholder(name string, n int) (*region, error) { return newAnon(name, n) }

// release gives the pages of elements [lo, hi) back to the kernel. An anonymous region reads
// as zeros afterwards (partial pages at the ends are cleared explicitly); a file region
// keeps its contents in the file and page cache.
func (r *region) release(lo, hi int) error {
	if r == nil || lo >= hi {
		return nil
	}
	a, z := lo*4, hi*4
	pa := (a + r.pageB - 1) / r.pageB * r.pageB
	pz := z / r.pageB * r.pageB
	if r.file == nil {
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
		return fmt.Errorf("zero: release %s: %w", r.name, err)
	}
	return nil
}

// free hands the pages that lie wholly inside elements [lo, hi) of an anonymous region back
// to the kernel lazily (MADV_FREE): their contents are undefined afterwards (the old values
// or zeros) until written. A file region is released as by release.
func (r *region) free(lo, hi int) error {
	if r == nil || lo >= hi {
		return nil
	}
	if r.file != nil {
		return r.release(lo, hi)
	}
	pa := (lo*4 + r.pageB - 1) / r.pageB * r.pageB
	pz := hi * 4 / r.pageB * r.pageB
	if pa >= pz {
		return nil
	}
	if err := madviseFree(r.raw[pa:pz]); err != nil {
		return fmt.Errorf("zero: free %s: %w", r.name, err)
	}
	return nil
}

// freeAll frees the whole region (see free).
func (r *region) freeAll() error {
	if r == nil || r.raw == nil {
		return nil
	}
	return r.free(0, len(r.raw)/4)
}

// dropPages gives the pages that lie wholly inside f back to the kernel lazily (MADV_FREE,
// see free): their contents are undefined afterwards. f must be memory without pointers
// whose contents its owner will overwrite before reading (a tape register).
func dropPages(f []float32) {
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

// releaseAll releases the whole region.
func (r *region) releaseAll() error {
	if r == nil {
		return nil
	}
	if err := r.discard(r.raw); err != nil {
		return fmt.Errorf("zero: release %s: %w", r.name, err)
	}
	return nil
}

// willNeed asks the kernel to start reading the region in (asynchronous readahead).
func (r *region) willNeed() {
	if r != nil && r.file != nil {
		madviseWillNeed(r.raw)
	}
}

// held is the number of bytes of an anonymous region that this process holds and the
// kernel cannot take back without asking: the mapping's Rss minus its LazyFree in
// /proc/self/smaps (pages freed with MADV_FREE and not written since are the kernel's to
// take). A file region's is its resident bytes, and so is an anonymous region's where
// there is no /proc/self/smaps.
//
// The kernel marks pages lazily free in per-CPU batches (a pagevec of 15 pages): up to 15
// pages per CPU freed last can still count as Rss without LazyFree when smaps is read. That
// much is not counted as held, so that a region released in full reads as 0.
func (r *region) held() int64 {
	if r == nil || r.raw == nil {
		return 0
	}
	if r.file != nil {
		return r.resident()
	}
	v := smapsFields(uintptr(unsafe.Pointer(&r.raw[0])), "Rss", "LazyFree")
	if v[0] < 0 {
		return r.resident()
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
