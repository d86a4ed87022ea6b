//go:build darwin || dragonfly || freebsd || netbsd

package region

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls region_mmap.go maps regions with. There is no MAP_NORESERVE: these
// kernels do not reserve swap for private mappings anyway (FreeBSD has no such flag).
var (
	mmap     = unix.Mmap
	mprotect = unix.Mprotect
	munmap   = unix.Munmap
)

const (
	protNone  = unix.PROT_NONE
	protRead  = unix.PROT_READ
	protRW    = unix.PROT_READ | unix.PROT_WRITE
	mapAnon   = unix.MAP_PRIVATE | unix.MAP_ANON
	mapShared = unix.MAP_SHARED
	haveSmaps = false // no /proc/self/smaps: Resident uses mincore for file regions too
)

// discard gives the pages of b (page-aligned, inside r) back to the kernel. MADV_DONTNEED
// keeps a page's contents here, so anonymous pages are replaced by a fresh zero-filled
// mapping of the same protection (MAP_FIXED) instead; a file's are advised MADV_DONTNEED.
func (r *Region) discard(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if r.file != nil {
		return unix.Madvise(b, unix.MADV_DONTNEED)
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&b[0]), uintptr(len(b)), r.prot, mapAnon|unix.MAP_FIXED)
	return err
}

// madviseFree hands b's pages back lazily (MADV_FREE), or with MADV_DONTNEED where the
// kernel refuses that; either leaves the contents undefined, as Free promises.
func madviseFree(b []byte) error {
	err := unix.Madvise(b, unix.MADV_FREE)
	if err == unix.EINVAL {
		err = unix.Madvise(b, unix.MADV_DONTNEED)
	}
	return err
}

func madviseWillNeed(b []byte) { _ = unix.Madvise(b, unix.MADV_WILLNEED) }

// mincore fills vec with the residency of b's pages (bit 0: MINCORE_INCORE).
// It is a variable so that a test can make it fail.
var mincore = func(b, vec []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

// msync writes b's dirty pages back to the file and waits (MS_SYNC).
func msync(b []byte) error { return unix.Msync(b, unix.MS_SYNC) }
