package webdataset_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/transforms"
	"github.com/gorgonia-parallel/gp/data/webdataset"
)

func TestExpand(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"a.tar", []string{"a.tar"}},
		{"train-{000..002}.tar", []string{"train-000.tar", "train-001.tar", "train-002.tar"}},
		{"{a,b}-{8..10}", []string{"a-8", "a-9", "a-10", "b-8", "b-9", "b-10"}},
	} {
		got, err := webdataset.Expand(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Expand(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if _, err := webdataset.Expand("x-{1..0}"); err == nil {
		t.Error("reversed range: want an error")
	}
}

func TestSplit(t *testing.T) {
	shards, _ := webdataset.Expand("s{0..9}")
	seen := map[string]int{}
	for rank := 0; rank < 2; rank++ {
		for w := 0; w < 3; w++ {
			for _, s := range webdataset.Split(shards, rank, 2, w, 3) {
				seen[s]++
			}
		}
	}
	if len(seen) != 10 {
		t.Errorf("ranks×workers cover %d of 10 shards", len(seen))
	}
	if got := webdataset.Split(shards, 1, 2, 0, 2); !slices.Equal(got, []string{"s1", "s5", "s9"}) {
		t.Errorf("rank 1 worker 0 of 2: %v", got)
	}
}

type file struct {
	name string
	data []byte
}

func writeTar(t *testing.T, path string, files []file) {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg})
		tw.Write(f.data)
	}
	tw.Close()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func jpeg(t testing.TB, v uint8) []byte {
	var img rgb.Image
	img.Resize(20, 20)
	for i := range img.Pix {
		img.Pix[i] = v
	}
	var b bytes.Buffer
	if err := rgb.EncodeJPEG(&b, &img, 90); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// shards writes 2 shards of 4 samples; the label is the sample number; one sample in shard 1
// lacks its cls when missing is set.
func shards(t *testing.T, missing bool) []string {
	dir := t.TempDir()
	var out []string
	for s := 0; s < 2; s++ {
		var files []file
		for k := 0; k < 4; k++ {
			n := s*4 + k
			key := fmt.Sprintf("dir/%06d", n)
			files = append(files, file{key + ".jpg", jpeg(t, uint8(n*30))})
			if !(missing && n == 5) {
				files = append(files, file{key + ".cls", []byte(fmt.Sprint(n))})
			}
			files = append(files, file{key + ".meta.json", []byte(fmt.Sprintf(`{"n": %d}`, n))})
		}
		p := filepath.Join(dir, fmt.Sprintf("train-%02d.tar", s))
		writeTar(t, p, files)
		out = append(out, p)
	}
	return out
}

func TestReadShardGroupsByKey(t *testing.T) {
	sh := shards(t, false)
	var keys []string
	err := webdataset.ReadShard(context.Background(), sh[1], func(s webdataset.Sample) error {
		keys = append(keys, s.Key)
		label, err := s.Label()
		var meta struct{ N int64 }
		if err == nil {
			b := s.Files["meta.json"]
			err = jsonUnmarshal(b, &meta)
		}
		if err != nil || meta.N != label || len(s.Files) != 3 {
			t.Errorf("%s: label %d meta %d files %d err %v", s.Key, label, meta.N, len(s.Files), err)
		}
		return nil
	})
	if err != nil || !slices.Equal(keys, []string{"dir/000004", "dir/000005", "dir/000006", "dir/000007"}) {
		t.Fatalf("keys %v, %v", keys, err)
	}
}

func pipe(t *testing.T) *transforms.Pipeline {
	p, err := transforms.Compose(transforms.Resize{Width: 8, Height: 8}, transforms.ToTensor{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoaderLabels: every sample is delivered once with its own label (the image's grey level
// encodes it), shuffled; a missing cls is fatal or skipped by policy, never a shifted label.
func TestLoaderLabels(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, missing := range []bool{false, true} {
		for _, bad := range []data.BadInput{data.Fail, data.Skip} {
			l := &webdataset.Loader{Shards: shards(t, missing), World: 1, Workers: 2, BatchSize: 3, Shuffle: 4,
				Seed: 1, Pipeline: pipe(t), Bad: bad}
			var labels []int64
			var fail error
			for b, err := range l.Batches(context.Background(), 0) {
				if err != nil {
					fail = err
					continue
				}
				for k := 0; k < b.N; k++ {
					grey := float64(b.Images[k*3*64]) * 255
					if want := float64(b.Labels[k] * 30); grey < want-3 || grey > want+3 {
						t.Fatalf("label %d with grey %.0f", b.Labels[k], grey)
					}
					labels = append(labels, b.Labels[k])
				}
			}
			switch {
			case missing && bad == data.Fail:
				if !errors.Is(fail, webdataset.ErrMissing) {
					t.Errorf("missing cls with Fail: %v", fail)
				}
			case missing:
				if len(labels) != 7 || l.Skipped() != 1 || slices.Contains(labels, 5) {
					t.Errorf("missing cls with Skip: labels %v skipped %d", labels, l.Skipped())
				}
			default:
				slices.Sort(labels)
				if fail != nil || !slices.Equal(labels, []int64{0, 1, 2, 3, 4, 5, 6, 7}) {
					t.Errorf("labels %v, %v", labels, fail)
				}
			}
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines left, %d before", n, before)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
