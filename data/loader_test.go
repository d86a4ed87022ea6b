package data_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/synth"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func synthFolder(t testing.TB, classes, per int) *data.ImageFolder {
	t.Helper()
	root := t.TempDir()
	if err := synth.WriteImageFolder(root, classes, per, 40, 3); err != nil {
		t.Fatal(err)
	}
	d, err := data.NewImageFolder(root, data.WithTransform(smallPipe(t)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// epochData runs one epoch and returns a copy of every batch's images and labels.
func epochData(t *testing.T, l *data.Loader, epoch int) ([][]float32, [][]int64) {
	t.Helper()
	l.SetEpoch(epoch)
	var imgs [][]float32
	var labels [][]int64
	for b, err := range l.Batches(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, slices.Clone(b.Images))
		labels = append(labels, slices.Clone(b.Labels))
	}
	return imgs, labels
}

// TestLoaderDeterministicAcrossWorkers: the same seed gives bit-identical batches with 1, 2 and 5
// workers and any prefetch depth; a new epoch reshuffles.
func TestLoaderDeterministicAcrossWorkers(t *testing.T) {
	d := synthFolder(t, 3, 7)
	var ref [][]float32
	var refLabels [][]int64
	for _, w := range []int{1, 2, 5} {
		l, err := data.NewLoader(d, data.WithBatchSize(4), data.WithWorkers(w), data.WithPrefetch(w*3), data.WithShuffle(true), data.WithSeed(11))
		if err != nil {
			t.Fatal(err)
		}
		if l.Len() != 6 {
			t.Fatalf("Len = %d, want 6 batches of 21 samples", l.Len())
		}
		imgs, labels := epochData(t, l, 2)
		if ref == nil {
			ref, refLabels = imgs, labels
			continue
		}
		for k := range ref {
			if !slices.Equal(ref[k], imgs[k]) || !slices.Equal(refLabels[k], labels[k]) {
				t.Fatalf("workers %d: batch %d differs from 1 worker", w, k)
			}
		}
	}
	l, _ := data.NewLoader(d, data.WithBatchSize(4), data.WithWorkers(2), data.WithShuffle(true), data.WithSeed(11))
	_, labels3 := epochData(t, l, 3)
	if slices.EqualFunc(refLabels, labels3, slices.Equal[[]int64]) {
		t.Error("epoch 3 has the same order as epoch 2")
	}
	st := l.Stats()
	if st.Images != 21 || st.ImagesPerSec() <= 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestLoaderLabelsFollowImages: with sequential order every sample's label is its class.
func TestLoaderLabelsFollowImages(t *testing.T) {
	d := synthFolder(t, 3, 3)
	l, _ := data.NewLoader(d, data.WithBatchSize(2), data.WithWorkers(2), data.WithDropLast(true))
	if l.Len() != 4 {
		t.Fatalf("Len = %d with drop last, want 4", l.Len())
	}
	n := 0
	for b, err := range l.Batches(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < b.N; k++ {
			if b.Labels[k] != d.Samples[b.Indices[k]].Label || len(b.Images) != b.N*3*16*16 {
				t.Fatalf("batch sample %d: label %d for index %d", k, b.Labels[k], b.Indices[k])
			}
		}
		n += b.N
	}
	if n != 8 {
		t.Errorf("delivered %d samples, want 8", n)
	}
}

// TestLoaderNoGoroutineLeak: breaking out early, cancelling the context and a Fail error all end
// every worker goroutine.
func TestLoaderNoGoroutineLeak(t *testing.T) {
	d := synthFolder(t, 2, 10)
	before := runtime.NumGoroutine()
	l, _ := data.NewLoader(d, data.WithBatchSize(2), data.WithWorkers(4), data.WithPrefetch(8))
	for range l.Batches(context.Background()) {
		break
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got error
	k := 0
	for _, err := range l.Batches(ctx) {
		if k++; k == 2 {
			cancel()
		}
		if err != nil {
			got = err
		}
	}
	if !errors.Is(got, context.Canceled) {
		t.Errorf("cancelled loop ended with %v, want context.Canceled", got)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the loops, %d before", n, before)
	}
}

// TestBadFiles writes one of every kind of bad file among good ones: Fail stops naming the file,
// Skip drops exactly the bad samples and keeps every other label with its image.
func TestBadFiles(t *testing.T) {
	bad := map[string][]byte{
		"zero.jpg":      {},
		"text.jpg":      []byte("not an image at all\n"),
		"html.png":      []byte("<html><body>404</body></html>"),
		"truncated.jpg": nil, // filled from a good JPEG
		"corrupt.jpg":   nil,
		"trunc.png":     nil,
	}
	for name := range bad {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if err := synth.WriteImageFolder(root, 3, 3, 40, 5); err != nil {
				t.Fatal(err)
			}
			src, err := os.ReadFile(filepath.Join(root, synth.ClassName(1), "00000.jpg"))
			if err != nil {
				t.Fatal(err)
			}
			content := bad[name]
			switch name {
			case "truncated.jpg":
				content = src[:len(src)*2/3]
			case "corrupt.jpg":
				content = slices.Clone(src)
				for i := 200; i < len(content)-2; i++ {
					content[i] = 0xFF
				}
			case "trunc.png":
				content = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00")
			}
			badPath := filepath.Join(root, synth.ClassName(1), "00001_"+name)
			if err := os.WriteFile(badPath, content, 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := data.NewImageFolder(root, data.WithTransform(smallPipe(t)))
			if err != nil {
				t.Fatal(err)
			}
			l, _ := data.NewLoader(d, data.WithBatchSize(4), data.WithWorkers(2))
			var fail error
			for _, err := range l.Batches(context.Background()) {
				if err != nil {
					fail = err
				}
			}
			if !errors.Is(fail, data.ErrBadSample) || !errors.Is(fail, data.ErrCorrupt) || !strings.Contains(fail.Error(), badPath) {
				t.Fatalf("Fail policy: %v; want ErrBadSample, ErrCorrupt and the path", fail)
			}
			l, _ = data.NewLoader(d, data.WithBatchSize(4), data.WithWorkers(2), data.WithBadInput(data.Skip), data.WithLogger(discard()))
			n := 0
			for b, err := range l.Batches(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				for k := 0; k < b.N; k++ {
					s := d.Samples[b.Indices[k]]
					if s.Path == filepath.ToSlash(badPath) || b.Labels[k] != s.Label {
						t.Fatalf("sample %s delivered with label %d", s.Path, b.Labels[k])
					}
				}
				n += b.N
			}
			st := l.Stats()
			if n != 9 || st.Skipped != 1 || len(st.Bad) != 1 || !strings.Contains(st.Bad[0], name) {
				t.Fatalf("Skip policy: %d samples, stats %+v", n, st)
			}
		})
	}
}
