package main

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// folderSamples lists DIR/side/<class>/<file> in ImageFolder order with class indices.
func folderSamples(t *testing.T, dir, side string) (paths []string, labels []int64) {
	t.Helper()
	classes, err := os.ReadDir(filepath.Join(dir, side))
	if err != nil {
		t.Fatal(err)
	}
	k := int64(0)
	for _, c := range classes {
		if !c.IsDir() {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, side, c.Name(), "*"))
		sort.Strings(files)
		for _, f := range files {
			paths = append(paths, f)
			labels = append(labels, k)
		}
		k++
	}
	return paths, labels
}

// writeNpy writes a little-endian .npy file (version 1.0).
func writeNpyShape(t *testing.T, path, descr string, shape []int, raw []byte) {
	t.Helper()
	sh := ""
	for _, d := range shape {
		sh += fmt.Sprintf("%d, ", d)
	}
	if len(shape) > 1 {
		sh = sh[:len(sh)-2]
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh)
	for (10+len(hdr)+1)%64 != 0 {
		hdr += " "
	}
	hdr += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(hdr)))
	b.WriteString(hdr)
	b.Write(raw)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNpyFormat(t *testing.T) {
	src := tinyData(t)
	dir := t.TempDir()
	for _, side := range []string{"train", "val"} {
		paths, labels := folderSamples(t, src, side)
		var pix []byte
		size := 0
		for _, p := range paths {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			img, err := jpeg.Decode(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			r := img.Bounds()
			size = r.Dx()
			for y := r.Min.Y; y < r.Max.Y; y++ {
				for x := r.Min.X; x < r.Max.X; x++ {
					cr, cg, cb, _ := img.At(x, y).RGBA()
					pix = append(pix, byte(cr>>8), byte(cg>>8), byte(cb>>8))
				}
			}
		}
		lab := make([]byte, 8*len(labels))
		for i, l := range labels {
			binary.LittleEndian.PutUint64(lab[8*i:], uint64(l))
		}
		writeNpyShape(t, filepath.Join(dir, side+"_images.npy"), "|u1", []int{len(paths), size, size, 3}, pix)
		writeNpyShape(t, filepath.Join(dir, side+"_labels.npy"), "<i8", []int{len(labels)}, lab)
	}
	cfg := tinyConfig(t, t.TempDir())
	cfg.Data, cfg.DataFormat, cfg.Epochs = dir, "npy", 1
	r := runWorld(t, 2, cfg)[0]
	if r.Steps != 12 || r.Top5 <= 0 {
		t.Fatalf("npy run: %d steps, top-5 %.1f", r.Steps, r.Top5)
	}
}

func TestWebDatasetFormat(t *testing.T) {
	src := tinyData(t)
	dir := t.TempDir()
	for _, side := range []string{"train", "val"} {
		paths, labels := folderSamples(t, src, side)
		for shard := 0; shard < 2; shard++ {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			for i := shard; i < len(paths); i += 2 {
				img, err := os.ReadFile(paths[i])
				if err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("s%05d", i)
				for _, m := range []struct {
					name string
					data []byte
				}{{key + ".jpg", img}, {key + ".cls", []byte(fmt.Sprint(labels[i]))}} {
					if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data))}); err != nil {
						t.Fatal(err)
					}
					tw.Write(m.data)
				}
			}
			tw.Close()
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%06d.tar", side, shard)), b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := tinyConfig(t, t.TempDir())
	cfg.Data, cfg.DataFormat, cfg.Epochs, cfg.NumClasses = dir, "webdataset", 1, 4
	r := runWorld(t, 2, cfg)[0]
	// Each rank holds one train shard of 48 samples: 12 batches of 4.
	if r.Steps != 12 || r.Top5 <= 0 {
		t.Fatalf("webdataset run: %d steps, top-5 %.1f", r.Steps, r.Top5)
	}
	for _, l := range r.LossHistory {
		if math.IsNaN(l) {
			t.Fatal("NaN loss")
		}
	}
}
