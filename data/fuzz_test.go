package data_test

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/internal/npyfile"
)

// fuzzFiles writes the named files into a fresh directory and returns their paths.
func fuzzFiles(t *testing.T, files ...[]byte) []string {
	dir := t.TempDir()
	var paths []string
	for i, b := range files {
		p := filepath.Join(dir, string(rune('a'+i)))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// FuzzIDX checks that an IDX images and labels pair, plain or gzip, opens into a dataset or
// fails with ErrCorrupt naming one of the two files, never panics, and that a dataset it
// opens serves the bytes it was given (pixel/255, labels as written).
func FuzzIDX(f *testing.F) {
	pix := []byte{0, 4, 8, 12, 16, 20, 255, 1, 2, 3, 4, 5}
	images := idxBytes(data.IDXImagesMagic, []int{2, 2, 3}, pix)
	labels := idxBytes(data.IDXLabelsMagic, []int{2}, []byte{2, 9})
	f.Add(images, labels)
	f.Add(gz(images), gz(labels))
	f.Add(idxBytes(data.IDXImagesMagic, []int{1 << 30, 1 << 30, 1 << 30}, nil), labels)
	f.Fuzz(func(t *testing.T, images, labels []byte) {
		paths := fuzzFiles(t, images, labels)
		d, err := data.NewIDXDataset(paths[0], paths[1])
		if err != nil {
			if !strings.Contains(err.Error(), paths[0]) && !strings.Contains(err.Error(), paths[1]) {
				t.Fatalf("error %v names neither file", err)
			}
			return
		}
		defer d.Close()
		plain := images
		if zr, err := gzip.NewReader(bytes.NewReader(images)); err == nil {
			var buf bytes.Buffer
			buf.ReadFrom(zr)
			plain = buf.Bytes()
		}
		c, h, w := d.Shape()
		px := plain[16:]
		dst := make([]float32, c*h*w)
		for i := 0; i < d.Len(); i++ {
			if _, err := d.Load(context.Background(), i, nil, dst); err != nil {
				t.Fatalf("sample %d: %v", i, err)
			}
			for j, v := range dst {
				if want := float32(px[i*h*w+j]) / 255; v != want {
					t.Fatalf("sample %d pixel %d = %v, want %v", i, j, v, want)
				}
			}
		}
	})
}

// FuzzArrayNPY checks NewArrayDataset on any pair of .npy files: a dataset or an error
// wrapping ErrCorrupt that names a file, never a panic; headers claiming more than the file
// holds are refused before anything of that size is allocated.
func FuzzArrayNPY(f *testing.F) {
	u8 := make([]byte, 2*2*3*3)
	for i := range u8 {
		u8[i] = byte(i * 7)
	}
	imgs := append(npyfile.Encode("|u1", false, []int{2, 2, 3, 3}), u8...)
	lbls := append(npyfile.Encode("<i8", false, []int{2}), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	f.Add(imgs, lbls)
	f.Add(append(npyfile.Encode("<f4", false, []int{1, 1, 1, 1}), 0, 0, 0x80, 0x3f), append(npyfile.Encode("<i4", false, []int{1}), 3, 0, 0, 0))
	f.Add([]byte("\x93NUMPY\x01\x00\x00\x00"), lbls)
	// No samples: the other dimensions are checked by no data.
	f.Add(npyfile.Encode("|u1", false, []int{0, 1 << 20, 1 << 20, 3}), npyfile.Encode("<i8", false, []int{0}))
	f.Fuzz(func(t *testing.T, images, labels []byte) {
		paths := fuzzFiles(t, images, labels)
		d, err := data.NewArrayDataset(paths[0], paths[1], data.NHWC)
		if err != nil {
			if !errors.Is(err, data.ErrCorrupt) && !errors.Is(err, data.ErrBadLabel) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrBadLabel", err)
			}
			if !strings.Contains(err.Error(), paths[0]) && !strings.Contains(err.Error(), paths[1]) {
				t.Fatalf("error %v names neither file", err)
			}
			return
		}
		defer d.Close()
		loadAll(t, d)
	})
}

// FuzzArrayNPZ checks NewArrayDatasetNPZ on any bytes as the .npz: a dataset or an error
// wrapping ErrCorrupt that names the file, never a panic.
func FuzzArrayNPZ(f *testing.F) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range []struct {
		name string
		b    []byte
	}{
		{"x.npy", append(npyfile.Encode("|u1", false, []int{1, 1, 2, 3}), 1, 2, 3, 4, 5, 6)},
		{"y.npy", append(npyfile.Encode("<i4", false, []int{1}), 0, 0, 0, 0)},
	} {
		w, _ := zw.Create(m.name)
		w.Write(m.b)
	}
	zw.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, npz []byte) {
		paths := fuzzFiles(t, npz)
		d, err := data.NewArrayDatasetNPZ(paths[0], "x", "y", data.NHWC)
		if err != nil {
			if !strings.Contains(err.Error(), paths[0]) || (!errors.Is(err, data.ErrCorrupt) && !errors.Is(err, data.ErrBadLabel)) {
				t.Fatalf("error %v: want ErrCorrupt or ErrBadLabel naming the file", err)
			}
			return
		}
		defer d.Close()
		loadAll(t, d)
	})
}

func loadAll(t *testing.T, d *data.ArrayDataset) {
	c, h, w := d.Shape()
	dst := make([]float32, c*h*w)
	for i := 0; i < d.Len(); i++ {
		if _, err := d.Load(context.Background(), i, nil, dst); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
	}
}
