package main

import (
	"fmt"
	"os"
	"strings"

	"codeberg.org/sbinet/npyio"
)

// readNpy reads a C-order .npy array of float32, float64, int64 or int32 as float32.
func readNpy(path string) ([]float32, []int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r, err := npyio.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	d := r.Header.Descr
	if d.Fortran {
		return nil, nil, fmt.Errorf("%s: Fortran-order arrays are not supported", path)
	}
	shape := append([]int{}, d.Shape...)
	var out []float32
	switch strings.Trim(d.Type, `'"`) {
	case "<f4":
		err = r.Read(&out)
	case "<f8":
		var v []float64
		if err = r.Read(&v); err == nil {
			out = make([]float32, len(v))
			for i, x := range v {
				out[i] = float32(x)
			}
		}
	case "<i8":
		var v []int64
		if err = r.Read(&v); err == nil {
			out = make([]float32, len(v))
			for i, x := range v {
				out[i] = float32(x)
			}
		}
	case "<i4":
		var v []int32
		if err = r.Read(&v); err == nil {
			out = make([]float32, len(v))
			for i, x := range v {
				out[i] = float32(x)
			}
		}
	default:
		return nil, nil, fmt.Errorf("%s: dtype %s not supported (want <f4, <f8, <i8 or <i4)", path, d.Type)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, shape, nil
}
