//go:build !unix

package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"codeberg.org/sbinet/npyio/npy"
)

// mapNPY reads a .npy file into memory where mmap is not available.
func mapNPY(path string) (npy.Header, []byte, func() error, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: %w", path, err)
	}
	off, err := npyDataOffset(b)
	if err != nil || off > len(b) {
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: bad header: %w", path, ErrCorrupt)
	}
	r, err := npy.NewReader(bytes.NewReader(b[:off]))
	if err != nil {
		return npy.Header{}, nil, nil, fmt.Errorf("images %s: %v: %w", path, err, ErrCorrupt)
	}
	return r.Header, b[off:], func() error { return nil }, nil
}

func bytesToF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
