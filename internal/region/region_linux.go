package region

import (
	"syscall"
	"unsafe"
)

// The system calls region_mmap.go maps regions with.
var (
	mmap     = syscall.Mmap
	mprotect = syscall.Mprotect
	munmap   = syscall.Munmap
)

const (
	protNone  = syscall.PROT_NONE
	protRead  = syscall.PROT_READ
	protRW    = syscall.PROT_READ | syscall.PROT_WRITE
	mapAnon   = syscall.MAP_PRIVATE | syscall.MAP_ANON | syscall.MAP_NORESERVE
	mapShared = syscall.MAP_SHARED
	haveSmaps = true // Resident reads a file region's Rss from /proc/self/smaps
)

// discard gives the pages of b (page-aligned, inside r) back to the kernel with
// MADV_DONTNEED: anonymous pages read as zeros afterwards, a file's stay in the file.
func (r *Region) discard(b []byte) error { return syscall.Madvise(b, syscall.MADV_DONTNEED) }

// madvFree is Linux's MADV_FREE (4.5 and later); where the kernel refuses it, Free falls
// back to MADV_DONTNEED.
const madvFree = 0x8

func madviseFree(b []byte) error {
	err := syscall.Madvise(b, madvFree)
	if err == syscall.EINVAL {
		err = syscall.Madvise(b, syscall.MADV_DONTNEED)
	}
	return err
}

func madviseWillNeed(b []byte) { _ = syscall.Madvise(b, syscall.MADV_WILLNEED) }

// mincore fills vec with the residency of b's pages (bit 0: resident).
// It is a variable so that a test can make it fail.
var mincore = func(b, vec []byte) error {
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

// msync writes b's dirty pages back to the file and waits (MS_SYNC).
func msync(b []byte) error {
	_, _, errno := syscall.Syscall(syscall.SYS_MSYNC, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), syscall.MS_SYNC)
	if errno != 0 {
		return errno
	}
	return nil
}
