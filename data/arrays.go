package data

import (
	"archive/zip"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"

	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/transforms"
	"github.com/gorgonia-parallel/gp/internal/npyfile"
)

// Layout is the axis order of an image array.
type Layout int

const (
	// NCHW arrays hold samples of channels × height × width (torch's layout).
	NCHW Layout = iota
	// NHWC arrays hold samples of height × width × channels (numpy/PIL's layout).
	NHWC
)

// ArrayDataset serves images and labels from .npy arrays (images uint8 or float32, 4-D in the
// given layout; labels int64 or int32, 1-D) or from two arrays of one .npz. A .npy file is
// memory-mapped where the platform allows, so only the pages a sample touches are read.
//
// Without a transform a sample is converted like ToTensor: uint8 divided by 255, float32 as
// stored, written CHW. With WithTransform (uint8, 3-channel only) each sample goes through the
// pipeline as an RGB image.
type ArrayDataset struct {
	n, c, h, w int
	layout     Layout
	u8         []uint8
	f32        []float32
	labels     []int64
	labelsName string // the labels' file (and array), for messages
	idx        []int  // by sample: its index in the arrays; nil when no sample was skipped
	skipped    []int  // array indices left out under Skip
	pipe       *transforms.Pipeline
	ow, oh     int
	unmap      func() error
	pool       sync.Pool
}

// NewArrayDataset opens the images and labels .npy files. Options: WithTransform,
// WithClasses, WithBadInput, WithLogger. The images must be a C-order 4-D array of at least
// one sample, each at least 1x1x1, and the labels one per sample; otherwise the error names
// the file and wraps ErrCorrupt. Every label is checked when it opens (see WithClasses): a
// bad one fails naming the labels file, the index and the value, or under Skip leaves that
// sample out.
func NewArrayDataset(images, labels string, layout Layout, opts ...Option) (*ArrayDataset, error) {
	d := &ArrayDataset{layout: layout}
	hdr, raw, unmap, err := mapNPY(images)
	if err != nil {
		return nil, err
	}
	d.unmap = unmap
	if err := d.setImages(images, hdr, raw); err != nil {
		d.Close()
		return nil, err
	}
	lh, lraw, err := readNPYFile(labels)
	if err != nil {
		d.Close()
		return nil, err
	}
	if err := d.setLabels(labels, lh, lraw); err != nil {
		d.Close()
		return nil, err
	}
	return d, d.finish(opts)
}

// NewArrayDatasetNPZ reads the images and labels arrays named imagesKey and labelsKey from one
// .npz (read into memory: a zip member may be compressed).
func NewArrayDatasetNPZ(path, imagesKey, labelsKey string, layout Layout, opts ...Option) (*ArrayDataset, error) {
	z, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
	}
	defer z.Close()
	members := map[string]*zip.File{}
	var keys []string
	for _, f := range z.File {
		members[f.Name] = f
		keys = append(keys, f.Name)
	}
	// numpy names members "<key>.npy" and np.load drops the suffix; accept either.
	var arrays [2]struct {
		h   npyfile.Header
		raw []byte
	}
	for i, k := range []*string{&imagesKey, &labelsKey} {
		if members[*k] == nil && members[*k+".npy"] != nil {
			*k += ".npy"
		}
		f := members[*k]
		if f == nil {
			return nil, fmt.Errorf("%s: no array %q (have %s): %w", path, *k, strings.Join(keys, ", "), ErrCorrupt)
		}
		if err := npyfile.Guard(func() error {
			var err error
			arrays[i].h, arrays[i].raw, err = npyfile.ReadMember(f)
			return err
		}); err != nil {
			return nil, fmt.Errorf("%s:%s: %w: %w", path, *k, ErrCorrupt, err)
		}
	}
	d := &ArrayDataset{layout: layout}
	if err := d.setImages(path+":"+imagesKey, arrays[0].h, arrays[0].raw); err != nil {
		return nil, err
	}
	if err := d.setLabels(path+":"+labelsKey, arrays[1].h, arrays[1].raw); err != nil {
		return nil, err
	}
	return d, d.finish(opts)
}

// readNPYFile reads a whole .npy file through npyfile's checks.
func readNPYFile(path string) (npyfile.Header, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return npyfile.Header{}, nil, fmt.Errorf("labels %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return npyfile.Header{}, nil, fmt.Errorf("labels %s: %w", path, err)
	}
	h, raw, err := npyfile.ReadArray(f, st.Size())
	if err != nil {
		return npyfile.Header{}, nil, fmt.Errorf("labels %s: %w: %w", path, ErrCorrupt, err)
	}
	return h, raw, nil
}

func (d *ArrayDataset) setImages(name string, hdr npyfile.Header, raw []byte) error {
	n := int(hdr.Elems)
	switch hdr.Descr {
	case "|u1", "<u1", "u1":
		d.u8 = raw[:n]
	case "<f4":
		d.f32 = bytesToF32(raw[:4*n])
	default:
		return fmt.Errorf("%s: dtype %s, want uint8 or little-endian float32: %w", name, hdr.Descr, ErrCorrupt)
	}
	return d.setShape(name, hdr.Shape, hdr.Fortran, n)
}

func (d *ArrayDataset) setShape(name string, shape []int, fortran bool, n int) error {
	if len(shape) != 4 || fortran {
		return fmt.Errorf("%s: shape %v (fortran %v), want a C-order 4-D array: %w", name, shape, fortran, ErrCorrupt)
	}
	if d.layout == NCHW {
		d.n, d.c, d.h, d.w = shape[0], shape[1], shape[2], shape[3]
	} else {
		d.n, d.h, d.w, d.c = shape[0], shape[1], shape[2], shape[3]
	}
	if d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 {
		// No samples leave the other dimensions unchecked by any data, and they would size
		// the caller's buffers; an empty dimension leaves nothing to train on.
		return fmt.Errorf("%s: shape %v, want at least 1 sample of at least 1x1x1: %w", name, shape, ErrCorrupt)
	}
	if d.n*d.c*d.h*d.w != n {
		return fmt.Errorf("%s: shape %v but %d elements: %w", name, shape, n, ErrCorrupt)
	}
	return nil
}

func (d *ArrayDataset) setLabels(name string, hdr npyfile.Header, raw []byte) error {
	d.labelsName = name
	if len(hdr.Shape) != 1 || hdr.Shape[0] != d.n {
		return fmt.Errorf("%s: labels shape %v, want [%d]: %w", name, hdr.Shape, d.n, ErrCorrupt)
	}
	le := binary.LittleEndian
	d.labels = make([]int64, d.n)
	switch hdr.Descr {
	case "<i8":
		for i := range d.labels {
			d.labels[i] = int64(le.Uint64(raw[8*i:]))
		}
	case "<i4":
		for i := range d.labels {
			d.labels[i] = int64(int32(le.Uint32(raw[4*i:])))
		}
	default:
		d.labels = nil
		return fmt.Errorf("%s: label dtype %s, want int64 or int32: %w", name, hdr.Descr, ErrCorrupt)
	}
	return nil
}

func (d *ArrayDataset) finish(opts []Option) error {
	c := newConfig(opts)
	if err := d.checkLabels(c); err != nil {
		d.Close()
		return err
	}
	d.pipe = c.transform
	d.ow, d.oh = d.w, d.h
	if d.pipe != nil {
		w, h, ok := d.pipe.OutSize()
		if !ok || d.u8 == nil || d.c != 3 {
			d.Close()
			return fmt.Errorf("array dataset: a transform needs 3-channel uint8 images and a fixed output size")
		}
		d.ow, d.oh = w, h
	}
	d.pool.New = func() any { return &arrayScratch{} }
	return nil
}

// checkLabels refuses labels outside [0, c.classes) (only negative ones when classes is 0),
// or under Skip leaves their samples out.
func (d *ArrayDataset) checkLabels(c config) error {
	var err error
	d.labels, d.idx, d.skipped, err = checkLabelRange(d.labelsName, d.labels, c)
	return err
}

// Skipped returns the array indices of the samples left out under Skip (labels out of
// range), in order.
func (d *ArrayDataset) Skipped() []int { return d.skipped }

type arrayScratch struct {
	img rgb.Image
	tr  transforms.Scratch
}

// Close unmaps the images file.
func (d *ArrayDataset) Close() error {
	if d.unmap == nil {
		return nil
	}
	err := d.unmap()
	d.unmap, d.u8, d.f32 = nil, nil, nil
	return err
}

// Labels returns the dataset's labels, by sample (skipped samples left out; do not modify
// them).
func (d *ArrayDataset) Labels() []int64 { return d.labels }

// Len is the number of samples.
func (d *ArrayDataset) Len() int { return len(d.labels) }

// Shape is the sample's channels and the (transformed) height and width.
func (d *ArrayDataset) Shape() (c, h, w int) { return d.c, d.oh, d.ow }

// Load writes sample i into dst as CHW float32.
func (d *ArrayDataset) Load(ctx context.Context, i int, rng *rand.Rand, dst []float32) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if i < 0 || i >= len(d.labels) {
		return 0, fmt.Errorf("array dataset: index %d out of range [0, %d)", i, len(d.labels))
	}
	label := d.labels[i]
	if d.idx != nil {
		i = d.idx[i]
	}
	size := d.c * d.h * d.w
	if d.pipe != nil {
		s := d.pool.Get().(*arrayScratch)
		defer d.pool.Put(s)
		s.img.Resize(d.w, d.h)
		src := d.u8[i*size : (i+1)*size]
		if d.layout == NHWC {
			copy(s.img.Pix, src)
		} else {
			for p := 0; p < d.h*d.w; p++ {
				s.img.Pix[3*p], s.img.Pix[3*p+1], s.img.Pix[3*p+2] = src[p], src[d.h*d.w+p], src[2*d.h*d.w+p]
			}
		}
		if _, _, err := d.pipe.RunImage(&s.img, rng, &s.tr, dst); err != nil {
			return 0, fmt.Errorf("array dataset sample %d: %w", i, err)
		}
		return label, nil
	}
	hw := d.h * d.w
	for p := 0; p < hw; p++ {
		for ch := 0; ch < d.c; ch++ {
			si := ch*hw + p
			if d.layout == NHWC {
				si = p*d.c + ch
			}
			if d.u8 != nil {
				dst[ch*hw+p] = float32(d.u8[i*size+si]) / 255
			} else {
				dst[ch*hw+p] = d.f32[i*size+si]
			}
		}
	}
	return label, nil
}
