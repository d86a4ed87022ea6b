package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
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

// writeNpy writes v with the given shape as a float32 .npy file (format version 1.0).
func writeNpy(path string, v []float32, shape []int) error {
	dims := make([]string, len(shape))
	for i, s := range shape {
		dims[i] = fmt.Sprint(s)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	header := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", tuple)
	pad := 64 - (10+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	_ = binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	b.Write(buf)
	return os.WriteFile(path, b.Bytes(), 0o644)
}
