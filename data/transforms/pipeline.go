package transforms

import (
	"fmt"
	"image"
	"math/rand/v2"

	"github.com/gorgonia-parallel/gp/data/rgb"
)

// Pipeline is a composed list of transforms ending in a normalized CHW float32 tensor. It is
// safe for concurrent use; each goroutine passes its own Scratch.
type Pipeline struct {
	ops  []Transform
	lut  [3][256]float32
	mean [3]float32
	std  [3]float32
	w, h int // static output size, 0 when it depends on the input
	dct  bool
}

// Compose builds a pipeline, as torchvision.transforms.Compose. Geometry must need at most one
// resampling pass (one resize, crops and flips anywhere); Normalize, if present, must come last.
func Compose(ts ...Transform) (*Pipeline, error) {
	p := &Pipeline{}
	mean, std := [3]float32{}, [3]float32{1, 1, 1}
	for i, t := range ts {
		switch n := t.(type) {
		case Normalize:
			if i != len(ts)-1 {
				return nil, fmt.Errorf("Normalize must be the last transform: %w", ErrCompose)
			}
			mean, std = n.Mean, n.Std
		case *Normalize:
			if i != len(ts)-1 {
				return nil, fmt.Errorf("Normalize must be the last transform: %w", ErrCompose)
			}
			mean, std = n.Mean, n.Std
		case nil:
			return nil, fmt.Errorf("transform %d is nil: %w", i, ErrCompose)
		default:
			p.ops = append(p.ops, t)
		}
	}
	p.mean, p.std = mean, std
	for c := 0; c < 3; c++ {
		for v := 0; v < 256; v++ {
			// torch: img.float().div(255), then sub_(mean).div_(std), each rounded to float32.
			x := float32(v) / 255
			p.lut[c][v] = (x - mean[c]) / std[c]
		}
	}
	// The output size is static when two different inputs plan to the same size.
	rng := rand.New(rand.NewPCG(1, 2))
	a, errA := p.Plan(500, 375, rng)
	b, errB := p.Plan(333, 517, rng)
	if errA != nil {
		return nil, errA
	}
	if errB == nil && a.Win.Size() == b.Win.Size() {
		p.w, p.h = a.Win.Dx(), a.Win.Dy()
	}
	return p, nil
}

// WithDCTScaling returns a copy of p that lets the libjpeg-turbo path decode JPEGs at 1/2, 1/4 or
// 1/8 scale (libjpeg's scale_denom) when the crop is still at least the output size after
// scaling. It is much faster on small outputs but no longer bit-exact with PIL.
func (p *Pipeline) WithDCTScaling(on bool) *Pipeline {
	q := *p
	q.dct = on
	return &q
}

// OutSize returns the output width and height when every input gives the same size.
func (p *Pipeline) OutSize() (w, h int, ok bool) { return p.w, p.h, p.w > 0 }

// Plan runs the transforms' geometry for a w×h source.
func (p *Pipeline) Plan(w, h int, rng *rand.Rand) (Plan, error) {
	pl := NewPlan(w, h)
	for _, t := range p.ops {
		if err := t.Apply(&pl, rng); err != nil {
			return pl, err
		}
	}
	if pl.Win.Empty() {
		return pl, fmt.Errorf("empty output %v: %w", pl.Win, ErrCompose)
	}
	return pl, nil
}

// Scratch is per-goroutine memory reused across samples.
type Scratch struct {
	img  rgb.Image
	tmp  []uint8
	hc   coeffs
	vc   coeffs
	rows []int32
}

// Run decodes an encoded image, applies the pipeline with the sample's rng and writes the result
// into dst as CHW float32 (len 3*h*w), returning w and h. Errors wrap rgb.ErrCorrupt for bad data.
func (p *Pipeline) Run(data []byte, rng *rand.Rand, s *Scratch, dst []float32) (w, h int, err error) {
	sw, sh, err := rgb.Size(data)
	if err != nil {
		return 0, 0, err
	}
	pl, err := p.Plan(sw, sh, rng)
	if err != nil {
		return 0, 0, err
	}
	denom := 1
	region := pl.Box
	if !pl.Resized {
		region = pl.Win.Add(pl.Box.Min)
	} else if p.dct {
		for _, d := range []int{8, 4, 2} {
			if pl.Box.Dx()/d >= pl.OutW && pl.Box.Dy()/d >= pl.OutH {
				denom = d
				break
			}
		}
	}
	region = region.Intersect(image.Rect(0, 0, sw, sh))
	if denom > 1 {
		region = image.Rect(region.Min.X/denom, region.Min.Y/denom, ceilDiv(region.Max.X, denom), ceilDiv(region.Max.Y, denom))
	}
	off, used, err := rgb.DecodeRegion(data, region, denom, &s.img)
	if err != nil {
		return 0, 0, err
	}
	return p.exec(&pl, &s.img, off, used, s, dst)
}

// RunImage applies the pipeline to a decoded image; see Run.
func (p *Pipeline) RunImage(img *rgb.Image, rng *rand.Rand, s *Scratch, dst []float32) (w, h int, err error) {
	pl, err := p.Plan(img.W, img.H, rng)
	if err != nil {
		return 0, 0, err
	}
	return p.exec(&pl, img, image.Point{}, 1, s, dst)
}

// Execute writes an already planned image (see Plan) into dst; RunImage is Plan then Execute.
func (p *Pipeline) Execute(img *rgb.Image, pl Plan, s *Scratch, dst []float32) (w, h int, err error) {
	return p.exec(&pl, img, image.Point{}, 1, s, dst)
}

func (p *Pipeline) exec(pl *Plan, img *rgb.Image, off image.Point, denom int, s *Scratch, dst []float32) (int, int, error) {
	w, h := pl.Win.Dx(), pl.Win.Dy()
	if len(dst) < 3*w*h {
		return 0, 0, fmt.Errorf("output %dx%d needs %d floats, dst has %d: %w", w, h, 3*w*h, len(dst), ErrCompose)
	}
	// The crop in decoded-image pixels.
	crop := pl.Box
	if denom > 1 {
		crop = image.Rect(roundDiv(crop.Min.X, denom), roundDiv(crop.Min.Y, denom), roundDiv(crop.Max.X, denom), roundDiv(crop.Max.Y, denom))
	}
	crop = crop.Sub(off)
	if !pl.Resized {
		copyWindow(img, crop.Min.Add(pl.Win.Min), pl, &p.lut, dst[:3*w*h])
		p.finish(pl, w, h, dst)
		return w, h, nil
	}
	crop = crop.Intersect(image.Rect(0, 0, img.W, img.H))
	if crop.Empty() {
		return 0, 0, fmt.Errorf("crop %v outside the %dx%d image: %w", pl.Box, img.W, img.H, ErrCompose)
	}
	resample(img, crop, pl, &p.lut, s, dst[:3*w*h])
	p.finish(pl, w, h, dst)
	return w, h, nil
}

func ceilDiv(a, b int) int  { return (a + b - 1) / b }
func roundDiv(a, b int) int { return (2*a + b) / (2 * b) }
