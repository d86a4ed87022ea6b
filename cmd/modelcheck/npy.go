package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/gorgonia-parallel/gp/internal/npyfile"
)

// readNpy reads a C-order .npy array of float32, float64, int64 or int32 as float32. The
// header is checked by npyfile before anything of its claimed size is allocated; errors name
// the file.
func readNpy(path string) ([]float32, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	return decodeNpy(path, f, st.Size())
}

// decodeNpy is readNpy over a reader of size bytes; name is used in errors.
func decodeNpy(name string, r io.Reader, size int64) ([]float32, []int, error) {
	h, raw, err := npyfile.ReadArray(r, size)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if h.Fortran {
		return nil, nil, fmt.Errorf("%s: Fortran-order arrays are not supported", name)
	}
	le := binary.LittleEndian
	out := make([]float32, h.Elems)
	switch h.Descr {
	case "<f4":
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case "<f8":
		for i := range out {
			out[i] = float32(math.Float64frombits(le.Uint64(raw[8*i:])))
		}
	case "<i8":
		for i := range out {
			out[i] = float32(int64(le.Uint64(raw[8*i:])))
		}
	case "<i4":
		for i := range out {
			out[i] = float32(int32(le.Uint32(raw[4*i:])))
		}
	default:
		return nil, nil, fmt.Errorf("%s: dtype %s not supported (want <f4, <f8, <i8 or <i4)", name, h.Descr)
	}
	return out, append([]int{}, h.Shape...), nil
}
