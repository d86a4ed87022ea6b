package data

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

// The IDX magic numbers NewIDXDataset accepts: two zero bytes, the element type (0x08,
// unsigned byte) and the number of dimensions.
const (
	IDXImagesMagic = 0x00000803 // N × H × W unsigned bytes
	IDXLabelsMagic = 0x00000801 // N unsigned bytes
)

// IDXDataset serves a pair of IDX files, the format of MNIST and Fashion-MNIST, as
// torchvision.datasets.MNIST reads them: an images file (magic 0x00000803, N × H × W unsigned
// bytes) and a labels file (magic 0x00000801, N unsigned bytes), each plain or gzip-compressed
// (told apart by the gzip magic bytes, not the file name). Both are read into memory when the
// data set opens (47 MB for Fashion-MNIST's training images).
//
// A sample is grey: Shape is (1, H, W). Without a transform it is converted like ToTensor,
// each byte divided by 255 in float32, and no normalisation is applied (compose a pipeline
// with Normalize for that, or normalise in the model). With WithTransform the image goes
// through the pipeline as an RGB image with three equal channels and channel 0 of the result
// is kept, so the pipeline's Normalize should use the same mean and std for every channel
// (FashionMNISTMean, FashionMNISTStd); the pipeline must have a fixed output size.
type IDXDataset struct {
	images, labelsName string // the files, for messages
	n, h, w            int
	pix                []uint8
	labels             []int64
	idx                []int // by sample: its index in the files; nil when no sample was skipped
	skipped            []int
	pipe               *transforms.Pipeline
	ow, oh             int
	pool               sync.Pool
}

// NewIDXDataset opens an IDX images file and its labels file. Options: WithClasses,
// WithBadInput, WithLogger, WithTransform. Errors name the file and what was expected and wrap
// ErrCorrupt (a wrong magic number, a truncated or over-long file, a count of 0, counts that
// disagree between the two files) or ErrBadLabel (a label outside WithClasses; under Skip the
// sample is left out instead, see Skipped).
func NewIDXDataset(images, labels string, opts ...Option) (*IDXDataset, error) {
	c := newConfig(opts)
	dims, pix, err := readIDX(images, IDXImagesMagic)
	if err != nil {
		return nil, err
	}
	ldims, lab, err := readIDX(labels, IDXLabelsMagic)
	if err != nil {
		return nil, err
	}
	if ldims[0] != dims[0] {
		return nil, fmt.Errorf("%s: %d labels, want %d, one per image in %s: %w", labels, ldims[0], dims[0], images, ErrCorrupt)
	}
	d := &IDXDataset{images: images, labelsName: labels, n: dims[0], h: dims[1], w: dims[2], pix: pix}
	d.labels = make([]int64, len(lab))
	for i, y := range lab {
		d.labels[i] = int64(y)
	}
	if d.labels, d.idx, d.skipped, err = checkLabelRange(labels, d.labels, c); err != nil {
		return nil, err
	}
	d.ow, d.oh = d.w, d.h
	if c.transform != nil {
		w, h, ok := c.transform.OutSize()
		if !ok {
			return nil, fmt.Errorf("idx dataset %s: the transform's output size depends on the input; add a fixed-size crop or resize", images)
		}
		d.pipe, d.ow, d.oh = c.transform, w, h
	}
	d.pool.New = func() any { return &idxScratch{} }
	return d, nil
}

// Len is the number of samples (those left out under Skip not counted).
func (d *IDXDataset) Len() int { return len(d.labels) }

// Shape is (1, H, W): the files' size, or the transform's output size.
func (d *IDXDataset) Shape() (c, h, w int) { return 1, d.oh, d.ow }

// Labels returns the labels by sample (skipped samples left out; do not modify them).
func (d *IDXDataset) Labels() []int64 { return d.labels }

// Skipped returns the file indices of the samples left out under Skip, in order.
func (d *IDXDataset) Skipped() []int { return d.skipped }

// Close releases the images; Load must not be called after it.
func (d *IDXDataset) Close() error {
	d.pix = nil
	return nil
}

// Load writes sample i into dst (len H*W of Shape) as float32 and returns its label.
func (d *IDXDataset) Load(ctx context.Context, i int, rng *rand.Rand, dst []float32) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if i < 0 || i >= len(d.labels) {
		return 0, fmt.Errorf("idx dataset %s: index %d out of range [0, %d)", d.images, i, len(d.labels))
	}
	label := d.labels[i]
	if d.idx != nil {
		i = d.idx[i]
	}
	hw := d.h * d.w
	src := d.pix[i*hw : (i+1)*hw]
	if d.pipe == nil {
		for p, v := range src {
			dst[p] = float32(v) / 255
		}
		return label, nil
	}
	s := d.pool.Get().(*idxScratch)
	defer d.pool.Put(s)
	s.img.Resize(d.w, d.h)
	for p, v := range src {
		s.img.Pix[3*p], s.img.Pix[3*p+1], s.img.Pix[3*p+2] = v, v, v
	}
	out := d.ow * d.oh
	s.rgb = grow(s.rgb, 3*out)
	if _, _, err := d.pipe.RunImage(&s.img, rng, &s.tr, s.rgb); err != nil {
		return 0, fmt.Errorf("idx dataset %s sample %d: %w", d.images, i, err)
	}
	copy(dst[:out], s.rgb[:out])
	return label, nil
}

type idxScratch struct {
	img rgb.Image
	tr  transforms.Scratch
	rgb []float32
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// maxIDXBytes bounds the data an IDX header may declare (16 GiB), so a corrupt header fails
// with a message instead of an allocation the machine cannot make.
const maxIDXBytes = 16 << 30

// readIDX reads an IDX file of unsigned bytes, plain or gzip-compressed, and returns its
// dimensions and data. want is the magic number expected; errors name the file and it.
func readIDX(path string, want uint32) ([]int, []byte, error) {
	kind := map[uint32]string{IDXImagesMagic: "images", IDXLabelsMagic: "labels"}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("idx %s %s: %w", kind[want], path, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	compressed := false
	if m, _ := br.Peek(2); len(m) == 2 && m[0] == 0x1f && m[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: gzip: %v: %w", path, err, ErrCorrupt)
		}
		defer zr.Close()
		r, compressed = zr, true
	}
	// corrupt wraps a read error: a short read is a truncated file, anything else (a gzip
	// checksum) a corrupt one.
	corrupt := func(what string, err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s: truncated in the %s: %w", path, what, ErrCorrupt)
		}
		if compressed {
			return fmt.Errorf("%s: %s: gzip: %v: %w", path, what, err, ErrCorrupt)
		}
		return fmt.Errorf("%s: %s: %w", path, what, err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, nil, corrupt(fmt.Sprintf("magic number (want 0x%08x, IDX %s)", want, kind[want]), err)
	}
	if magic := binary.BigEndian.Uint32(hdr[:]); magic != want {
		also := ""
		if k, ok := kind[magic]; ok {
			also = " (an IDX " + k + " file)"
		}
		return nil, nil, fmt.Errorf("%s: magic number 0x%08x%s, want 0x%08x (IDX %s: unsigned bytes, %d dimensions): %w",
			path, magic, also, want, kind[want], want&0xff, ErrCorrupt)
	}
	nd := int(want & 0xff)
	raw := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, nil, corrupt(fmt.Sprintf("header (%d dimensions)", nd), err)
	}
	dims := make([]int, nd)
	size := int64(1)
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(raw[4*i:]))
		if dims[i] == 0 {
			if i == 0 {
				// Nothing to train or evaluate on, and the header's other dimensions,
				// unchecked by any data, would size the caller's buffers.
				return nil, nil, fmt.Errorf("%s: the header counts 0 %s, want at least 1: %w", path, kind[want], ErrCorrupt)
			}
			return nil, nil, fmt.Errorf("%s: dimensions %v, want images of at least 1x1: %w", path, dims, ErrCorrupt)
		}
		if size *= int64(dims[i]); size > maxIDXBytes {
			return nil, nil, fmt.Errorf("%s: dimensions %v declare more than %d bytes: %w", path, dims[:i+1], int64(maxIDXBytes), ErrCorrupt)
		}
	}
	// Read one byte past the declared size, so trailing data is seen, and let the buffer grow
	// with what is really there rather than with what a corrupt header claims.
	buf, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return nil, nil, corrupt("data", err)
	}
	switch {
	case int64(len(buf)) < size:
		return nil, nil, fmt.Errorf("%s: truncated: %d data bytes, want %d for dimensions %v: %w", path, len(buf), size, dims, ErrCorrupt)
	case int64(len(buf)) > size:
		return nil, nil, fmt.Errorf("%s: data past the %d bytes of dimensions %v: %w", path, size, dims, ErrCorrupt)
	}
	// ReadAll read to the end of the stream, where gzip verifies its checksum (a mismatch is
	// the error above).
	return dims, buf, nil
}

// FashionMNISTDir is where Debian's dataset-fashion-mnist package installs the four files.
const FashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// FashionMNISTClasses are Fashion-MNIST's class names by label (torchvision's classes).
var FashionMNISTClasses = []string{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}

// Fashion-MNIST's training set mean and standard deviation of the pixels scaled to [0, 1]
// (computed over all 60,000 images by TestFashionMNISTInstalled), for a Normalize transform.
const (
	FashionMNISTMean = 0.2860
	FashionMNISTStd  = 0.3530
)

// FashionMNIST opens the training (60,000 images) or test (10,000) split of Fashion-MNIST in
// dir under the standard names, train-images-idx3-ubyte and train-labels-idx1-ubyte or
// t10k-…, each plain or with .gz (as zalandoresearch publishes them and Debian installs them);
// dir "" is FashionMNISTDir. MNIST uses the same names, so this opens MNIST too. Labels are
// checked against 10 classes unless opts say otherwise; opts are NewIDXDataset's.
func FashionMNIST(dir string, train bool, opts ...Option) (*IDXDataset, error) {
	if dir == "" {
		dir = FashionMNISTDir
	}
	split := "t10k"
	if train {
		split = "train"
	}
	var paths [2]string
	for i, kind := range []string{"images-idx3-ubyte", "labels-idx1-ubyte"} {
		name := split + "-" + kind
		for _, p := range []string{name, name + ".gz"} {
			if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
				paths[i] = filepath.Join(dir, p)
				break
			}
		}
		if paths[i] == "" {
			return nil, fmt.Errorf("fashion-mnist %s: no %s or %s.gz (Debian: apt-get install dataset-fashion-mnist, installed in %s): %w",
				dir, name, name, FashionMNISTDir, fs.ErrNotExist)
		}
	}
	return NewIDXDataset(paths[0], paths[1], append([]Option{WithClasses(len(FashionMNISTClasses))}, opts...)...)
}
