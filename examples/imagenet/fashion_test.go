package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"github.com/gorgonia-parallel/gp/trainer"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// writeIDX writes an IDX images file (n × h × w bytes) and its labels under MNIST's names
// for split ("train" or "t10k") into dir, gzipped when gz is set. Pixel p of image i is
// (i*7 + p) mod 256, so that images differ and every byte value occurs.
func writeIDX(t *testing.T, dir, split string, labels []byte, h, w int, gz bool) {
	t.Helper()
	n := len(labels)
	var img bytes.Buffer
	binary.Write(&img, binary.BigEndian, []uint32{data.IDXImagesMagic, uint32(n), uint32(h), uint32(w)})
	for i := range n {
		for p := range h * w {
			img.WriteByte(byte(i*7 + p))
		}
	}
	var lab bytes.Buffer
	binary.Write(&lab, binary.BigEndian, []uint32{data.IDXLabelsMagic, uint32(n)})
	lab.Write(labels)
	for name, b := range map[string][]byte{split + "-images-idx3-ubyte": img.Bytes(), split + "-labels-idx1-ubyte": lab.Bytes()} {
		if gz {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(b)
			zw.Close()
			name, b = name+".gz", z.Bytes()
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func cycleLabels(n, classes int) []byte {
	l := make([]byte, n)
	for i := range l {
		l[i] = byte(i % classes)
	}
	return l
}

// -data-format fashion-mnist reads the train-* pair (gzipped here) for training and the whole
// t10k-* pair (plain here) for validation, and trains resnet8 on two ranks: 64 images in
// local batches of 4 are 8 steps a rank.
func TestFashionMNISTFormat(t *testing.T) {
	dir := t.TempDir()
	writeIDX(t, dir, "train", cycleLabels(64, 10), 28, 28, true)
	writeIDX(t, dir, "t10k", cycleLabels(22, 10), 28, 28, false)
	cfg := tinyConfig(t, t.TempDir())
	cfg.Data, cfg.DataFormat, cfg.Arch, cfg.ImageSize, cfg.Epochs = dir, "fashion-mnist", "resnet8", 28, 1
	r := runWorld(t, 2, cfg)[0]
	if r.Steps != 8 || r.Top5 <= 0 {
		t.Fatalf("fashion-mnist run: %d steps, top-5 %.1f%%; want 8 steps and a validation", r.Steps, r.Top5)
	}
	for _, l := range r.LossHistory {
		if math.IsNaN(l) {
			t.Fatal("NaN loss")
		}
	}
}

// The splits openIDX serves: 3 × 28 × 28, every test image once over the ranks (11 + 11 of
// 22, in batches of 4: 3 batches each, the last short), 10 classes; a label past the class
// count is an error naming the labels file; a missing folder names what to install.
func TestFashionMNISTSplits(t *testing.T) {
	dir := t.TempDir()
	writeIDX(t, dir, "train", cycleLabels(64, 10), 28, 28, false)
	writeIDX(t, dir, "t10k", cycleLabels(22, 10), 28, 28, true)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := tinyConfig(t, t.TempDir())
	cfg.Data, cfg.DataFormat, cfg.ImageSize = dir, "idx", 28
	seen := 0
	for _, g := range comm.NewLocalGroups(2) {
		c := cfg
		train, val, err := openIDX(testEnv(g, &c, log), &c, log)
		if err != nil {
			t.Fatal(err)
		}
		if train.C != 3 || train.H != 28 || train.W != 28 || train.Classes != 10 || val.Images != 22 || train.Steps != 8 {
			t.Fatalf("train %dx%dx%d, %d classes, %d steps; val %d images", train.C, train.H, train.W, train.Classes, train.Steps, val.Images)
		}
		for b, err := range val.Batches(context.Background(), 0, 0) {
			if err != nil {
				t.Fatal(err)
			}
			seen += b.N
		}
	}
	if seen != 22 {
		t.Errorf("validation saw %d images over both ranks, want all 22", seen)
	}

	writeIDX(t, dir, "t10k", append(cycleLabels(21, 10), 10), 28, 28, true)
	_, _, err := openIDX(testEnv(comm.NewLocalGroups(1)[0], &cfg, log), &cfg, log)
	if !errors.Is(err, data.ErrBadLabel) || !strings.Contains(err.Error(), "t10k-labels-idx1-ubyte.gz") {
		t.Errorf("label 10 of 10 classes: %v, want data.ErrBadLabel naming the t10k labels file", err)
	}
	writeIDX(t, dir, "t10k", cycleLabels(22, 10), 28, 28, true)
	for _, a := range []Augment{{CropPad: 28}, {ColorJitter: 0.4}} {
		c := cfg
		c.Augment = a
		if _, _, err := openIDX(testEnv(comm.NewLocalGroups(1)[0], &c, log), &c, log); err == nil {
			t.Errorf("%+v on 28x28 grey images: no error", a)
		}
	}
	cfg.Data = filepath.Join(dir, "missing")
	if _, _, err := openIDX(testEnv(comm.NewLocalGroups(1)[0], &cfg, log), &cfg, log); err == nil || !strings.Contains(err.Error(), "dataset-fashion-mnist") {
		t.Errorf("a missing folder: %v, want an error naming the Debian package", err)
	}
}

// greyImages: validation images are the normalised pixels in three equal channels; a vertical
// flip of probability 1 mirrors rows; training images are, in every channel, a shift by at
// most Pad pixels of the image (or of its mirror image) with the padding at the normalised
// zero, and flips and shifts occur.
func TestGreyImagesAugment(t *testing.T) {
	dir := t.TempDir()
	const h, w = 6, 5
	writeIDX(t, dir, "train", cycleLabels(3, 10), h, w, false)
	ds, err := data.FashionMNIST(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	p := greyPreset{Pad: 2, HFlip: 0.5, Mean: 0.25, Std: 0.5}
	ctx := context.Background()
	src := make([]float32, h*w)
	if _, err := ds.Load(ctx, 1, nil, src); err != nil {
		t.Fatal(err)
	}
	norm := func(v float32) float32 { return (v - p.Mean) / p.Std }
	dst := make([]float32, 3*h*w)
	if _, err := newGreyImages(ds, p, false).Load(ctx, 1, nil, dst); err != nil {
		t.Fatal(err)
	}
	for i, v := range dst {
		if v != norm(src[i%(h*w)]) {
			t.Fatalf("validation pixel %d: %g, want %g", i, v, norm(src[i%(h*w)]))
		}
	}
	// shifted is the training image for offset (dx, dy) and flip, built the slow way: pad,
	// crop at (pad+dx, pad+dy), then mirror.
	shifted := func(dx, dy int, flip bool) []float32 {
		pw, ph := w+2*p.Pad, h+2*p.Pad
		padded := make([]float32, pw*ph)
		for y := range h {
			copy(padded[(y+p.Pad)*pw+p.Pad:], src[y*w:(y+1)*w])
		}
		out := make([]float32, h*w)
		for y := range h {
			for x := range w {
				out[y*w+x] = norm(padded[(y+p.Pad+dy)*pw+x+p.Pad+dx])
			}
			if flip {
				for a, b := y*w, y*w+w-1; a < b; a, b = a+1, b-1 {
					out[a], out[b] = out[b], out[a]
				}
			}
		}
		return out
	}
	rng := rand.New(rand.NewPCG(1, 2))
	if _, err := newGreyImages(ds, greyPreset{VFlip: 1, Mean: p.Mean, Std: p.Std}, true).Load(ctx, 1, rng, dst); err != nil {
		t.Fatal(err)
	}
	for i, v := range dst {
		y, x := i%(h*w)/w, i%w
		if want := norm(src[(h-1-y)*w+x]); v != want {
			t.Fatalf("vertical flip: pixel %d: %g, want %g", i, v, want)
		}
	}
	train := newGreyImages(ds, p, true)
	kinds := map[[3]int]bool{}
	for range 200 {
		if _, err := train.Load(ctx, 1, rng, dst); err != nil {
			t.Fatal(err)
		}
		found := false
		for dy := -p.Pad; dy <= p.Pad && !found; dy++ {
			for dx := -p.Pad; dx <= p.Pad && !found; dx++ {
				for _, flip := range []bool{false, true} {
					want := shifted(dx, dy, flip)
					same := true
					for i, v := range dst {
						same = same && v == want[i%(h*w)]
					}
					if same {
						f := 0
						if flip {
							f = 1
						}
						kinds[[3]int{dx, dy, f}] = true
						found = true
						break
					}
				}
			}
		}
		if !found {
			t.Fatalf("training image %v is no padded crop or flip of the image", dst[:h*w])
		}
	}
	// 50 (offset, flip) pairs are possible; 200 draws see most of them.
	if len(kinds) < 40 {
		t.Errorf("200 training images took %d of the 50 (offset, flip) pairs", len(kinds))
	}
}

// The real data set, when Debian's dataset-fashion-mnist is installed: 60,000 training
// images in 468 local batches of 64 per rank of two, and all 10,000 test images.
func TestFashionMNISTInstalledSplits(t *testing.T) {
	if _, err := os.Stat(data.FashionMNISTDir); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := Config{DataFormat: "fashion-mnist", Batch: 128, Workers: 1, ImageSize: 224}
	g := comm.NewLocalGroups(2)[0]
	train, val, err := openData(context.Background(), testEnv(g, &cfg, log), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Data != data.FashionMNISTDir || train.Images != 60000 || val.Images != 10000 || train.Steps != 468 || train.Classes != 10 {
		t.Errorf("data %s: %d train images (%d steps of 64), %d test images, %d classes", cfg.Data, train.Images, train.Steps, val.Images, train.Classes)
	}
}

// testEnv is the trainer.Env a Trainer gives cfg's data in group g.
func testEnv(g comm.Group, cfg *Config, log *slog.Logger) trainer.Env {
	return trainer.Env{Group: g, Rank: g.Rank(), World: g.Size(), Batch: cfg.Batch / g.Size(), Seed: cfg.Seed, Classes: cfg.NumClasses, Log: log}
}
