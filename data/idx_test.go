package data_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

// idxBytes is an IDX file of unsigned bytes: magic, big-endian dimensions, data.
func idxBytes(magic uint32, dims []int, raw []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, magic)
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, raw...)
}

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestIDXDataset: plain and gzip IDX pairs (told apart by content: the gzip files are named
// without .gz and the plain ones with it) give ToTensor's samples and the labels; every kind of
// bad file fails naming the file and what was expected.
func TestIDXDataset(t *testing.T) {
	const n, h, w = 3, 4, 5
	pix := make([]byte, n*h*w)
	for i := range pix {
		pix[i] = byte(i * 4)
	}
	images := idxBytes(data.IDXImagesMagic, []int{n, h, w}, pix)
	labels := idxBytes(data.IDXLabelsMagic, []int{n}, []byte{2, 0, 9})
	for _, tc := range []struct {
		name           string
		images, labels []byte
		gzip           bool
		opts           []data.Option
		bad            string // "images" or "labels": the file the error must name; "" for none
		want           string // a part of the error
		is             error
	}{
		{name: "plain", images: images, labels: labels},
		{name: "gzip", images: images, labels: labels, gzip: true},
		{name: "labels at the class count", images: images, labels: labels, opts: []data.Option{data.WithClasses(10)}},
		{name: "labels past the class count", images: images, labels: labels, opts: []data.Option{data.WithClasses(5)},
			bad: "labels", want: "label 9 at index 2 (want 0..4 for 5 classes)", is: data.ErrBadLabel},
		{name: "labels past the class count, gzip", images: images, labels: labels, gzip: true, opts: []data.Option{data.WithClasses(5)},
			bad: "labels", want: "label 9 at index 2", is: data.ErrBadLabel},
		{name: "labels file as images", images: labels, labels: labels,
			bad: "images", want: "magic number 0x00000801 (an IDX labels file), want 0x00000803 (IDX images: unsigned bytes, 3 dimensions)", is: data.ErrCorrupt},
		{name: "images file as labels", images: images, labels: images, gzip: true,
			bad: "labels", want: "magic number 0x00000803 (an IDX images file), want 0x00000801", is: data.ErrCorrupt},
		{name: "float images", images: idxBytes(0x00000d03, []int{n, h, w}, make([]byte, 4*n*h*w)), labels: labels,
			bad: "images", want: "magic number 0x00000d03, want 0x00000803", is: data.ErrCorrupt},
		{name: "truncated images", images: images[:len(images)-7], labels: labels,
			bad: "images", want: "truncated: 53 data bytes, want 60 for dimensions [3 4 5]", is: data.ErrCorrupt},
		{name: "truncated images, gzip", images: images[:len(images)-7], labels: labels, gzip: true,
			bad: "images", want: "truncated: 53 data bytes, want 60", is: data.ErrCorrupt},
		{name: "truncated header", images: images[:10], labels: labels,
			bad: "images", want: "truncated in the header (3 dimensions)", is: data.ErrCorrupt},
		{name: "empty labels", images: images, labels: nil,
			bad: "labels", want: "truncated in the magic number (want 0x00000801, IDX labels)", is: data.ErrCorrupt},
		{name: "trailing data", images: append(slices.Clone(images), 1, 2), labels: labels,
			bad: "images", want: "data past the 60 bytes of dimensions [3 4 5]", is: data.ErrCorrupt},
		{name: "counts disagree", images: images, labels: idxBytes(data.IDXLabelsMagic, []int{2}, []byte{1, 2}),
			bad: "labels", want: "2 labels, want 3, one per image in", is: data.ErrCorrupt},
		{name: "counts disagree, gzip", images: images, labels: idxBytes(data.IDXLabelsMagic, []int{4}, []byte{1, 2, 3, 4}), gzip: true,
			bad: "labels", want: "4 labels, want 3", is: data.ErrCorrupt},
		{name: "a header declaring terabytes", images: idxBytes(data.IDXImagesMagic, []int{1 << 30, 1 << 10, 1 << 10}, pix), labels: labels,
			bad: "images", want: "declare more than", is: data.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ip, lp := filepath.Join(dir, "images-idx3-ubyte.gz"), filepath.Join(dir, "labels-idx1-ubyte.gz")
			ib, lb := tc.images, tc.labels
			if tc.gzip {
				ip, lp = strings.TrimSuffix(ip, ".gz"), strings.TrimSuffix(lp, ".gz")
				ib, lb = gzipBytes(t, ib), gzipBytes(t, lb)
			}
			os.WriteFile(ip, ib, 0o644)
			os.WriteFile(lp, lb, 0o644)
			d, err := data.NewIDXDataset(ip, lp, tc.opts...)
			if tc.bad != "" {
				file := map[string]string{"images": ip, "labels": lp}[tc.bad]
				if err == nil || !errors.Is(err, tc.is) || !strings.HasPrefix(err.Error(), file+": ") || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v: want %v starting with %s and saying %q", err, tc.is, file, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c, hh, ww := d.Shape(); d.Len() != n || c != 1 || hh != h || ww != w {
				t.Fatalf("Len %d Shape %d,%d,%d; want %d samples of 1,%d,%d", d.Len(), c, hh, ww, n, h, w)
			}
			for i, want := range []int64{2, 0, 9} {
				dst := make([]float32, h*w)
				y, err := d.Load(t.Context(), i, nil, dst)
				if err != nil || y != want {
					t.Fatalf("sample %d: label %d, %v; want %d", i, y, err, want)
				}
				for p, v := range dst {
					// ToTensor: the byte over 255 in float32, exactly.
					if want := float32(pix[i*h*w+p]) / 255; v != want {
						t.Fatalf("sample %d pixel %d: %v, want %v", i, p, v, want)
					}
				}
			}
		})
	}
}

// TestIDXMissingFile: a file that is not there is fs.ErrNotExist, with its path.
func TestIDXMissingFile(t *testing.T) {
	dir := t.TempDir()
	lp := filepath.Join(dir, "labels")
	os.WriteFile(lp, idxBytes(data.IDXLabelsMagic, []int{1}, []byte{0}), 0o644)
	ip := filepath.Join(dir, "nope")
	if _, err := data.NewIDXDataset(ip, lp); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), ip) {
		t.Fatalf("error %v: want ErrNotExist naming %s", err, ip)
	}
}

// TestIDXSkipAndTransform: under Skip a label past the class count leaves its sample out;
// with a transform the grey image goes through the RGB pipeline and keeps one channel,
// normalised with channel 0's mean and std.
func TestIDXSkipAndTransform(t *testing.T) {
	const n, h, w = 4, 6, 6
	pix := make([]byte, n*h*w)
	for i := range pix {
		pix[i] = byte(i)
	}
	dir := t.TempDir()
	ip, lp := filepath.Join(dir, "i"), filepath.Join(dir, "l")
	os.WriteFile(ip, idxBytes(data.IDXImagesMagic, []int{n, h, w}, pix), 0o644)
	os.WriteFile(lp, idxBytes(data.IDXLabelsMagic, []int{n}, []byte{1, 12, 0, 3}), 0o644)
	const mean, std = 0.25, 0.5
	pipe, err := transforms.Compose(transforms.CenterCrop{Width: 4, Height: 4}, transforms.ToTensor{},
		transforms.Normalize{Mean: [3]float32{mean, 9, 9}, Std: [3]float32{std, 9, 9}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := data.NewIDXDataset(ip, lp, data.WithClasses(10), data.WithBadInput(data.Skip), data.WithTransform(pipe))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Labels(), []int64{1, 0, 3}) || !slices.Equal(d.Skipped(), []int{1}) {
		t.Fatalf("labels %v skipped %v; want [1 0 3] and [1]", d.Labels(), d.Skipped())
	}
	if c, hh, ww := d.Shape(); c != 1 || hh != 4 || ww != 4 {
		t.Fatalf("Shape %d,%d,%d; want 1,4,4", c, hh, ww)
	}
	dst := make([]float32, 16)
	if y, err := d.Load(t.Context(), 1, nil, dst); err != nil || y != 0 {
		t.Fatalf("sample 1: label %d, %v; want 0 (file index 2)", y, err)
	}
	for r := 0; r < 4; r++ {
		for c := 0; c < 4; c++ {
			v := pix[2*h*w+(r+1)*w+c+1]
			want := (float32(v)/255 - mean) / std
			if got := dst[r*4+c]; math.Abs(float64(got-want)) > 1e-6 {
				t.Fatalf("pixel %d,%d: %v, want %v (file sample 2, centre crop, normalised)", r, c, got, want)
			}
		}
	}
}

// TestFashionMNISTMissing: a directory without the files names the directory, the missing
// file and the Debian package.
func TestFashionMNISTMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := data.FashionMNIST(dir, false)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) ||
		!strings.Contains(err.Error(), "t10k-images-idx3-ubyte") || !strings.Contains(err.Error(), "dataset-fashion-mnist") {
		t.Fatalf("error %v: want ErrNotExist naming %s, t10k-images-idx3-ubyte and the package", err, dir)
	}
	// Plain names are found as well as .gz ones.
	os.WriteFile(filepath.Join(dir, "t10k-images-idx3-ubyte"), idxBytes(data.IDXImagesMagic, []int{1, 2, 2}, make([]byte, 4)), 0o644)
	os.WriteFile(filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"), gzipBytes(t, idxBytes(data.IDXLabelsMagic, []int{1}, []byte{11})), 0o644)
	if _, err := data.FashionMNIST(dir, false); !errors.Is(err, data.ErrBadLabel) || !strings.Contains(err.Error(), "want 0..9 for 10 classes") {
		t.Fatalf("error %v: want ErrBadLabel against 10 classes", err)
	}
}

// TestFashionMNISTInstalled reads Debian's dataset-fashion-mnist: 60,000 training and 10,000
// test images of 28x28, 10 classes, 6,000 (train) and 1,000 (test) of each; the training
// pixels' mean and std agree with FashionMNISTMean/Std to the 4 digits they are given with.
func TestFashionMNISTInstalled(t *testing.T) {
	if _, err := os.Stat(data.FashionMNISTDir); err != nil {
		t.Skipf("Debian's dataset-fashion-mnist is not installed (%v); scripts/install-deps.sh installs it", err)
	}
	for _, tc := range []struct {
		train bool
		n     int
	}{{true, 60000}, {false, 10000}} {
		d, err := data.FashionMNIST("", tc.train)
		if err != nil {
			t.Fatal(err)
		}
		if c, h, w := d.Shape(); d.Len() != tc.n || c != 1 || h != 28 || w != 28 {
			t.Fatalf("train=%v: Len %d Shape %d,%d,%d; want %d of 1,28,28", tc.train, d.Len(), c, h, w, tc.n)
		}
		hist := make([]int, 10)
		for _, y := range d.Labels() {
			hist[y]++
		}
		for y, k := range hist {
			if k != tc.n/10 {
				t.Fatalf("train=%v: class %d (%s) has %d samples, want %d; histogram %v", tc.train, y, data.FashionMNISTClasses[y], k, tc.n/10, hist)
			}
		}
		if !tc.train {
			continue
		}
		var sum, sq float64
		dst := make([]float32, 28*28)
		for i := 0; i < d.Len(); i++ {
			if _, err := d.Load(t.Context(), i, nil, dst); err != nil {
				t.Fatal(err)
			}
			for _, v := range dst {
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
		}
		cnt := float64(d.Len() * 28 * 28)
		mean := sum / cnt
		std := math.Sqrt(sq/cnt - mean*mean)
		if math.Abs(mean-data.FashionMNISTMean) > 5e-5 || math.Abs(std-data.FashionMNISTStd) > 5e-5 {
			t.Fatalf("training pixels: mean %.5f std %.5f; FashionMNISTMean/Std say %.4f, %.4f", mean, std, data.FashionMNISTMean, data.FashionMNISTStd)
		}
	}
}

// TestIDXLoader: an IDX data set through a DistributedSampler and the Loader: the two ranks'
// batches hold every sample once, each with its own label.
func TestIDXLoader(t *testing.T) {
	const n, h, w = 10, 2, 3
	pix := make([]byte, n*h*w)
	lab := make([]byte, n)
	for i := range n {
		lab[i] = byte(i % 4)
		for p := range h * w {
			pix[i*h*w+p] = byte(i)
		}
	}
	dir := t.TempDir()
	ip, lp := filepath.Join(dir, "i.gz"), filepath.Join(dir, "l")
	os.WriteFile(ip, gzipBytes(t, idxBytes(data.IDXImagesMagic, []int{n, h, w}, pix)), 0o644)
	os.WriteFile(lp, idxBytes(data.IDXLabelsMagic, []int{n}, lab), 0o644)
	d, err := data.NewIDXDataset(ip, lp, data.WithClasses(4))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for rank := range 2 {
		s, err := data.NewDistributedSampler(d.Len(), rank, 2, true, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		l, err := data.NewLoader(d, data.WithBatchSize(2), data.WithWorkers(2), data.WithSampler(s))
		if err != nil {
			t.Fatal(err)
		}
		for b, err := range l.Batches(t.Context()) {
			if err != nil {
				t.Fatal(err)
			}
			if b.C != 1 || b.H != h || b.W != w {
				t.Fatalf("batch of %dx%dx%d, want 1x%dx%d", b.C, b.H, b.W, h, w)
			}
			for j := range b.N {
				i := int(math.Round(float64(b.Images[j*h*w] * 255)))
				if seen[i] || b.Labels[j] != int64(i%4) {
					t.Fatalf("rank %d: sample %d (seen before %v) with label %d, want %d", rank, i, seen[i], b.Labels[j], i%4)
				}
				seen[i] = true
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("saw %d samples, want %d", len(seen), n)
	}
}
