package webdataset_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/transforms"
	"github.com/gorgonia-parallel/gp/data/webdataset"
	"github.com/gorgonia-parallel/gp/internal/npyfile"
)

func tarBytes(files []file) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg})
		tw.Write(f.data)
	}
	tw.Close()
	return b.Bytes()
}

// TestNPYBadMember: a .npy member npyio would panic on, and one claiming 2^60 elements, fail
// with ErrCorrupt naming the shard, the sample and the field.
func TestNPYBadMember(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"no newline in header", []byte("\x93NUMPY\x01\x00\x04\x00{'de"), "header"},
		{"2^60 elements", npyfile.Encode("<f4", false, []int{1 << 30, 1 << 30}), "needs 4611686018427387904 data bytes"},
	} {
		s := webdataset.Sample{Key: "k7", Shard: "train-000.tar", Files: map[string][]byte{"seg.npy": tc.b}}
		var v []float32
		_, err := s.NPY("seg.npy", &v)
		if !errors.Is(err, data.ErrCorrupt) || !strings.Contains(err.Error(), "train-000.tar: k7.seg.npy") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrCorrupt naming train-000.tar: k7.seg.npy and %q", tc.name, err, tc.want)
		}
	}
}

// FuzzReadTar checks that ReadTar and every field decoder (cls, json, npy, image) turn any
// shard into samples or errors, never a panic; errors name the shard; and that the samples
// of a shard that reads cleanly, written back as a tar, read back equal.
func FuzzReadTar(f *testing.F) {
	npyMember := append(npyfile.Encode("<f4", false, []int{2}), 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40)
	f.Add(tarBytes([]file{
		{"s/000.jpg", jpeg(f, 40)}, {"s/000.cls", []byte("3")}, {"s/000.json", []byte(`{"a": [1, 2]}`)},
		{"s/001.png", pngBytes(f)}, {"s/001.cls", []byte(" 7\n")}, {"s/001.npy", npyMember},
	}))
	f.Add(tarBytes([]file{{"x.seg.npy", []byte("\x93NUMPY\x01\x00\x04\x00{'de")}, {"x.cls", []byte("-1")}}))
	pipe, err := transforms.Compose(transforms.Resize{Width: 4, Height: 4}, transforms.ToTensor{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var got []webdataset.Sample
		rng := rand.New(rand.NewPCG(1, 2))
		var sc transforms.Scratch
		dst := make([]float32, 3*4*4)
		err := webdataset.ReadTar(context.Background(), "fuzz.tar", bytes.NewReader(in), func(s webdataset.Sample) error {
			got = append(got, s)
			s.Label()
			var v any
			s.JSON(&v)
			for ext := range s.Files {
				if strings.HasSuffix(ext, "npy") {
					var f32 []float32
					if _, err := s.NPY(ext, &f32); err != nil && !strings.Contains(err.Error(), "fuzz.tar") {
						t.Fatalf("NPY error %v does not name the shard", err)
					}
				}
			}
			if err := s.Image(pipe, rng, &sc, dst); err != nil && !strings.Contains(err.Error(), "fuzz.tar") {
				t.Fatalf("Image error %v does not name the shard", err)
			}
			return nil
		})
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.tar") {
				t.Fatalf("error %v does not name the shard", err)
			}
			return
		}
		var files []file
		for _, s := range got {
			for _, ext := range slices.Sorted(maps.Keys(s.Files)) {
				files = append(files, file{s.Key + "." + ext, s.Files[ext]})
			}
		}
		var back []webdataset.Sample
		if err := webdataset.ReadTar(context.Background(), "again.tar", bytes.NewReader(tarBytes(files)), func(s webdataset.Sample) error {
			back = append(back, s)
			return nil
		}); err != nil {
			t.Fatalf("written back: %v", err)
		}
		if len(back) != len(got) {
			t.Fatalf("%d samples read back as %d", len(got), len(back))
		}
		for i := range got {
			if back[i].Key != got[i].Key || !maps.EqualFunc(back[i].Files, got[i].Files, bytes.Equal) {
				t.Fatalf("sample %q changed in a round trip", got[i].Key)
			}
		}
	})
}

// FuzzExpand checks that Expand never panics or runs away on a pattern, and that its names
// number at most MaxShards.
func FuzzExpand(f *testing.F) {
	for _, p := range []string{"a.tar", "train-{000..002}.tar", "{a,b}-{8..10}", "x-{0..9223372036854775807}", "{0..999}{0..999}{0..999}"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, err := webdataset.Expand(p); err == nil && len(got) > webdataset.MaxShards {
			t.Fatalf("%q expands to %d names", p, len(got))
		}
	})
}

func pngBytes(t testing.TB) []byte {
	var b bytes.Buffer
	if err := rgb.EncodePNG(&b, &rgb.Image{W: 2, H: 1, Pix: []uint8{1, 2, 3, 4, 5, 6}}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
