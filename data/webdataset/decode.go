package webdataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"codeberg.org/sbinet/npyio/npy"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/transforms"
	"github.com/gorgonia-parallel/gp/internal/npyfile"
)

// Label decodes the "cls" field (an ASCII integer), or "cls2"/"index" when cls is absent.
func (s Sample) Label() (int64, error) {
	for _, k := range []string{"cls", "cls2", "index"} {
		if b, ok := s.Files[k]; ok {
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s.%s: %q is not an integer label", s.Shard, s.Key, k, b)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s: sample %s has no cls: %w", s.Shard, s.Key, ErrMissing)
}

// ImageExtensions are the fields Image looks for, in order.
var ImageExtensions = []string{"jpg", "jpeg", "png", "ppm", "pgm", "bmp", "tif", "tiff", "webp"}

// Image decodes the sample's image field through the pipeline into dst (CHW float32).
func (s Sample) Image(p *transforms.Pipeline, rng *rand.Rand, sc *transforms.Scratch, dst []float32) error {
	for _, k := range ImageExtensions {
		if b, ok := s.Files[k]; ok {
			if _, _, err := p.Run(b, rng, sc, dst); err != nil {
				return fmt.Errorf("%s: %s.%s: %w", s.Shard, s.Key, k, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: sample %s has no image: %w", s.Shard, s.Key, ErrMissing)
}

// JSON unmarshals the "json" field into v.
func (s Sample) JSON(v any) error {
	b, ok := s.Files["json"]
	if !ok {
		return fmt.Errorf("%s: sample %s has no json: %w", s.Shard, s.Key, ErrMissing)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %s.json: %w", s.Shard, s.Key, err)
	}
	return nil
}

// NPY reads the field ext (e.g. "npy", "seg.npy") with npyio into ptr (a pointer to a slice).
// The member's header is checked by npyfile first (a shape claiming more than the member
// holds is refused before npyio allocates it); a bad member, or a panic in npyio, is an error
// wrapping data.ErrCorrupt that names the shard, the sample and the field.
func (s Sample) NPY(ext string, ptr any) (npy.Header, error) {
	b, ok := s.Files[ext]
	if !ok {
		return npy.Header{}, fmt.Errorf("%s: sample %s has no %s: %w", s.Shard, s.Key, ext, ErrMissing)
	}
	r, _, err := npyfile.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return npy.Header{}, fmt.Errorf("%s: %s.%s: %w: %w", s.Shard, s.Key, ext, data.ErrCorrupt, err)
	}
	if err := npyfile.Guard(func() error { return r.Read(ptr) }); err != nil {
		if errors.Is(err, npyfile.ErrBad) {
			err = fmt.Errorf("%w: %w", data.ErrCorrupt, err)
		}
		return r.Header, fmt.Errorf("%s: %s.%s: %w", s.Shard, s.Key, ext, err)
	}
	return r.Header, nil
}

// Shuffler is webdataset's shuffle buffer: it holds up to Size samples and emits a random one
// for each new sample once full (after Initial samples), then drains in random order.
type Shuffler struct {
	Size, Initial int
	rng           *rand.Rand
	buf           []Sample
}

// NewShuffler returns a buffer of size samples seeded by seed.
func NewShuffler(size, initial int, seed uint64) *Shuffler {
	return &Shuffler{Size: size, Initial: min(initial, size), rng: rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))}
}

// Push adds s and returns a sample to emit once the buffer holds Initial samples.
func (b *Shuffler) Push(s Sample) (Sample, bool) {
	b.buf = append(b.buf, s)
	if len(b.buf) < max(b.Initial, 1) {
		return Sample{}, false
	}
	return b.pop(), true
}

// Drain returns the remaining samples in random order.
func (b *Shuffler) Drain() []Sample {
	var out []Sample
	for len(b.buf) > 0 {
		out = append(out, b.pop())
	}
	return out
}

func (b *Shuffler) pop() Sample {
	i := b.rng.IntN(len(b.buf))
	s := b.buf[i]
	b.buf[i] = b.buf[len(b.buf)-1]
	b.buf = b.buf[:len(b.buf)-1]
	return s
}
