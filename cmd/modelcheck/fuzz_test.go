package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/npyfile"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// TestReadNpyBad: the header that panicked npyio, and one claiming 2^60 elements, are errors
// naming the file.
func TestReadNpyBad(t *testing.T) {
	for _, in := range [][]byte{
		[]byte("\x93NUMPY\x01\x00\x04\x00{'de"),
		npyfile.Encode("<f4", false, []int{1 << 30, 1 << 30}),
		append(npyfile.Encode("|u1", false, []int{1}), 7),
	} {
		if _, _, err := decodeNpy("in/x.npy", bytes.NewReader(in), int64(len(in))); err == nil || !strings.HasPrefix(err.Error(), "in/x.npy: ") {
			t.Errorf("%q: error %v, want one naming in/x.npy", in, err)
		}
	}
}

// FuzzReadNpy checks that modelcheck's input reader turns any bytes into an array or an
// error naming the file, never a panic, and that an array it reads, written back with
// checkpoint.SaveArray (the writer modelcheck's outputs use), reads back equal.
func FuzzReadNpy(f *testing.F) {
	dir := f.TempDir()
	for i, e := range []nn.StateEntry{
		{Shape: []int{2, 3}, F32: []float32{1, 2, 3, -4, 5, float32(math.Inf(1))}},
		{Shape: []int{2}, I64: []int64{1, 4}},
		{Shape: []int{}, F64: []float64{0.5}},
	} {
		p := filepath.Join(dir, fmt.Sprint(i, ".npy"))
		if err := checkpoint.SaveArray(p, e); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		x, shape, err := decodeNpy("fuzz.npy", bytes.NewReader(in), int64(len(in)))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.npy: ") {
				t.Fatalf("error %v does not name the file", err)
			}
			return
		}
		p := filepath.Join(t.TempDir(), "again.npy")
		if err := checkpoint.SaveArray(p, nn.StateEntry{Shape: shape, F32: x}); err != nil {
			t.Fatalf("shape %v with %d values: %v", shape, len(x), err)
		}
		y, shape2, err := readNpy(p)
		if err != nil || !slices.Equal(shape, shape2) || !slices.EqualFunc(x, y, func(a, b float32) bool { return a == b || (a != a && b != b) }) {
			t.Fatalf("round trip of %v: %v", shape, err)
		}
	})
}
