//go:build unix

package data

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"codeberg.org/sbinet/npyio/npy"
)

// mapNPY memory-maps a .npy file and returns its header and data bytes.
func mapNPY(path string) (npy.Header, []byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: %w", path, err)
	}
	if st.Size() == 0 {
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: zero-byte file: %w", path, ErrCorrupt)
	}
	mm, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: mmap: %w", path, err)
	}
	unmap := func() error { return syscall.Munmap(mm) }
	off, err := npyDataOffset(mm)
	if err == nil && off > len(mm) {
		err = fmt.Errorf("header past the end of the file: %w", ErrCorrupt)
	}
	if err != nil {
		unmap()
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: %w", path, err)
	}
	r, err := npy.NewReader(bytes.NewReader(mm[:off]))
	if err != nil {
		unmap()
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: %v: %w", path, err, ErrCorrupt)
	}
	return r.Header, mm[off:], unmap, nil
}

// bytesToF32 views little-endian float32 data in place (mapped pages are page-aligned and .npy
// data starts at a multiple of 64 bytes).
func bytesToF32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
