//go:build unix

package data

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/gorgonia-parallel/gp/internal/npyfile"
)

// mapNPY memory-maps a .npy file and returns its checked header and data bytes.
func mapNPY(path string) (npyfile.Header, []byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return npyfile.Header{}, nil, nil, fmt.Errorf("images %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return npyfile.Header{}, nil, nil, fmt.Errorf("images %s: %w", path, err)
	}
	if st.Size() == 0 {
		return npyfile.Header{}, nil, nil, fmt.Errorf("images %s: zero-byte file: %w", path, ErrCorrupt)
	}
	mm, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return npyfile.Header{}, nil, nil, fmt.Errorf("images %s: mmap: %w", path, err)
	}
	unmap := func() error { return syscall.Munmap(mm) }
	h, err := npyfile.Parse(bytes.NewReader(mm), int64(len(mm)))
	if err != nil {
		unmap()
		return npyfile.Header{}, nil, nil, fmt.Errorf("images %s: %w: %w", path, ErrCorrupt, err)
	}
	return h, mm[h.Offset : h.Offset+h.DataBytes()], unmap, nil
}

// bytesToF32 views little-endian float32 data in place (mapped pages are page-aligned and .npy
// data starts at a multiple of 64 bytes).
func bytesToF32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
