package data_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio/npy"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

func writeNPY(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := npy.Write(f, v); err != nil {
		t.Fatal(err)
	}
}

// TestArrayDataset: NHWC uint8 and NCHW float32 .npy (memory-mapped), and .npz, give the same
// CHW samples; labels int64 and int32.
func TestArrayDataset(t *testing.T) {
	dir := t.TempDir()
	const n, c, h, w = 3, 3, 4, 5
	u8 := make([]uint8, n*h*w*c)
	f32 := make([]float32, n*c*h*w)
	for i := 0; i < n; i++ {
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				for ch := 0; ch < c; ch++ {
					v := uint8(i*50 + y*10 + x*3 + ch)
					u8[((i*h+y)*w+x)*c+ch] = v
					f32[((i*c+ch)*h+y)*w+x] = float32(v) / 255
				}
			}
		}
	}
	u8npy := npyBytes("|u1", []int{n, h, w, c}, u8)
	os.WriteFile(filepath.Join(dir, "u8.npy"), u8npy, 0o644)
	fb := make([]byte, 4*len(f32))
	for i, v := range f32 {
		binary.LittleEndian.PutUint32(fb[4*i:], math.Float32bits(v))
	}
	os.WriteFile(filepath.Join(dir, "f32.npy"), npyBytes("<f4", []int{n, c, h, w}, fb), 0o644)
	writeNPY(t, filepath.Join(dir, "l64.npy"), []int64{7, 8, 9})
	writeNPY(t, filepath.Join(dir, "l32.npy"), []int32{7, 8, 9})
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	l64, _ := os.ReadFile(filepath.Join(dir, "l64.npy"))
	for name, b := range map[string][]byte{"x.npy": u8npy, "y.npy": l64} {
		f, _ := zw.Create(name)
		f.Write(b)
	}
	zw.Close()
	os.WriteFile(filepath.Join(dir, "a.npz"), zb.Bytes(), 0o644)
	a, err := data.NewArrayDataset(filepath.Join(dir, "u8.npy"), filepath.Join(dir, "l64.npy"), data.NHWC)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := data.NewArrayDataset(filepath.Join(dir, "f32.npy"), filepath.Join(dir, "l32.npy"), data.NCHW)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	z, err := data.NewArrayDatasetNPZ(filepath.Join(dir, "a.npz"), "x", "y", data.NHWC)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		var out [3][]float32
		for k, ds := range []data.Dataset{a, b, z} {
			out[k] = make([]float32, c*h*w)
			label, err := ds.Load(ctx, i, nil, out[k])
			if err != nil || label != int64(7+i) {
				t.Fatalf("dataset %d sample %d: label %d, %v", k, i, label, err)
			}
		}
		for j := range out[0] {
			if out[0][j] != out[1][j] || out[0][j] != out[2][j] || out[0][j] != f32[i*c*h*w+j] {
				t.Fatalf("sample %d element %d: %v %v %v want %v", i, j, out[0][j], out[1][j], out[2][j], f32[i*c*h*w+j])
			}
		}
	}
	// Through a transform: 3-channel uint8 only.
	tr, err := data.NewArrayDataset(filepath.Join(dir, "u8.npy"), filepath.Join(dir, "l64.npy"), data.NHWC,
		data.WithTransform(transforms.Eval(4, 2)))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if c, h, w := tr.Shape(); c != 3 || h != 2 || w != 2 {
		t.Fatalf("transformed shape %d %d %d", c, h, w)
	}
	// Bad arrays.
	os.WriteFile(filepath.Join(dir, "zero.npy"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "junk.npy"), []byte("PK not numpy at all"), 0o644)
	raw, _ := os.ReadFile(filepath.Join(dir, "u8.npy"))
	os.WriteFile(filepath.Join(dir, "short.npy"), raw[:len(raw)-10], 0o644)
	writeNPY(t, filepath.Join(dir, "l2.npy"), []int64{1, 2})
	for _, c := range [][2]string{{"zero.npy", "l64.npy"}, {"junk.npy", "l64.npy"}, {"short.npy", "l64.npy"}, {"u8.npy", "l2.npy"}, {"u8.npy", "zero.npy"}} {
		_, err := data.NewArrayDataset(filepath.Join(dir, c[0]), filepath.Join(dir, c[1]), data.NHWC)
		if !errors.Is(err, data.ErrCorrupt) {
			t.Errorf("%s + %s: %v, want ErrCorrupt", c[0], c[1], err)
		}
	}
}

// npyBytes writes a version 1.0 .npy file by hand (npyio writes 1-D and 2-D arrays only).
func npyBytes(descr string, shape []int, raw []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, strings.Join(dims, ", "))
	for (10+len(hdr)+1)%64 != 0 {
		hdr += " "
	}
	hdr += "\n"
	out := []byte("\x93NUMPY\x01\x00")
	out = binary.LittleEndian.AppendUint16(out, uint16(len(hdr)))
	return append(append(out, hdr...), raw...)
}
