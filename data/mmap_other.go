//go:build !unix

package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/gorgonia-parallel/gp/internal/npyfile"
)

// mapNPY reads a .npy file into memory where mmap is not available.
func mapNPY(path string) (npyfile.Header, []byte, func() error, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return npyfile.Header{}, nil, nil, fmt.Errorf("images %s: %w", path, err)
	}
	h, err := npyfile.Parse(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return npyfile.Header{}, nil, nil, fmt.Errorf("images %s: %w: %w", path, ErrCorrupt, err)
	}
	return h, b[h.Offset : h.Offset+h.DataBytes()], func() error { return nil }, nil
}

func bytesToF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
