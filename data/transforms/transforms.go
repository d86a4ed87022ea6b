// Package transforms implements torchvision's image transforms (RandomResizedCrop, RandomCrop
// with padding, RandomHorizontalFlip, RandomVerticalFlip, Resize, CenterCrop, ColorJitter,
// ToTensor, Normalize) fused into one resampling pass that writes normalized CHW float32
// straight into a batch, matching PIL's numerics (ColorJitter: torchvision's on tensors).
package transforms

import (
	"errors"
	"fmt"
	"image"
	"math"
	"math/rand/v2"
)

// ImageNet's per-channel mean and standard deviation (RGB, on 0..1 values), as in torchvision's
// reference training scripts.
var (
	ImageNetMean = [3]float32{0.485, 0.456, 0.406}
	ImageNetStd  = [3]float32{0.229, 0.224, 0.225}
)

// ErrCompose reports a pipeline that cannot be executed as one exact resampling pass.
var ErrCompose = errors.New("transforms: unsupported composition")

// Plan is the geometry a pipeline applies to one image, built by the transforms in order. The
// "virtual image" each transform sees is the window Win of the source box Box resampled to
// OutW×OutH, mirrored left-right when Flip is set.
type Plan struct {
	SrcW, SrcH int             // size of the source image
	Box        image.Rectangle // crop in source pixels, as PIL's Image.crop
	OutW, OutH int             // size Box is resampled to (Box's own size until a resize)
	Win        image.Rectangle // output window in resampled pixels; outside it is zero padding
	Flip       bool            // mirror the window left-right
	FlipV      bool            // mirror the window top-bottom
	Resized    bool            // a resize has been planned
	Jitter     *Jitter         // colour adjustment of the output (ColorJitter), nil for none
}

// NewPlan returns the identity plan for a w×h source.
func NewPlan(w, h int) Plan {
	r := image.Rect(0, 0, w, h)
	return Plan{SrcW: w, SrcH: h, Box: r, OutW: w, OutH: h, Win: r}
}

// Size is the size of the virtual image the next transform sees.
func (p *Plan) Size() (w, h int) { return p.Win.Dx(), p.Win.Dy() }

// Crop keeps the h×w region at (top, left) of the virtual image, as PIL's crop (zero outside).
func (p *Plan) Crop(top, left, h, w int) {
	if p.Flip {
		left = p.Win.Dx() - left - w
	}
	if p.FlipV {
		top = p.Win.Dy() - top - h
	}
	p.Win = image.Rect(p.Win.Min.X+left, p.Win.Min.Y+top, p.Win.Min.X+left+w, p.Win.Min.Y+top+h)
}

// ResizeTo resamples the virtual image to w×h (bilinear with antialias, as PIL). Only one resize
// per plan is exact; a second returns ErrCompose.
func (p *Plan) ResizeTo(w, h int) error {
	if w <= 0 || h <= 0 {
		return fmt.Errorf("resize to %dx%d: %w", w, h, ErrCompose)
	}
	if p.Resized {
		return fmt.Errorf("a second resize (to %dx%d) needs an intermediate image: %w", w, h, ErrCompose)
	}
	if !p.Win.In(image.Rect(0, 0, p.OutW, p.OutH)) {
		return fmt.Errorf("resize of a zero-padded crop: %w", ErrCompose)
	}
	// Before any resize the resampled image is Box itself, so the window maps back to source pixels.
	p.Box = p.Win.Add(p.Box.Min)
	p.OutW, p.OutH, p.Resized = w, h, true
	p.Win = image.Rect(0, 0, w, h)
	return nil
}

// Transform is one step of a pipeline; it updates the plan of one sample. rng is the sample's
// own generator, so the result does not depend on which worker runs it.
type Transform interface {
	Apply(p *Plan, rng *rand.Rand) error
}

// RandomResizedCrop is torchvision's RandomResizedCrop: a crop of random area fraction in Scale
// and aspect ratio (log-uniform) in Ratio, ten tries then a centre-crop fallback, resized to
// Width×Height.
type RandomResizedCrop struct {
	Width, Height int
	Scale         [2]float64 // default {0.08, 1}
	Ratio         [2]float64 // default {3/4, 4/3}
}

// NewRandomResizedCrop returns RandomResizedCrop(size) with torchvision's default scale and ratio.
func NewRandomResizedCrop(size int) *RandomResizedCrop {
	return &RandomResizedCrop{Width: size, Height: size, Scale: [2]float64{0.08, 1}, Ratio: [2]float64{3.0 / 4, 4.0 / 3}}
}

// Apply samples the crop and plans crop+resize.
func (t *RandomResizedCrop) Apply(p *Plan, rng *rand.Rand) error {
	w, h := p.Size()
	top, left, ch, cw := t.Params(w, h, rng)
	p.Crop(top, left, ch, cw)
	return p.ResizeTo(t.Width, t.Height)
}

// Params is torchvision's RandomResizedCrop.get_params for a width×height image: it returns the
// crop's top, left, height and width.
func (t *RandomResizedCrop) Params(width, height int, rng *rand.Rand) (top, left, h, w int) {
	area := float64(width * height)
	lr0, lr1 := math.Log(t.Ratio[0]), math.Log(t.Ratio[1])
	for range 10 {
		target := area * (t.Scale[0] + (t.Scale[1]-t.Scale[0])*rng.Float64())
		aspect := math.Exp(lr0 + (lr1-lr0)*rng.Float64())
		w = int(math.RoundToEven(math.Sqrt(target * aspect)))
		h = int(math.RoundToEven(math.Sqrt(target / aspect)))
		if 0 < w && w <= width && 0 < h && h <= height {
			top = rng.IntN(height - h + 1)
			left = rng.IntN(width - w + 1)
			return top, left, h, w
		}
	}
	in := float64(width) / float64(height)
	lo, hi := min(t.Ratio[0], t.Ratio[1]), max(t.Ratio[0], t.Ratio[1])
	switch {
	case in < lo:
		w = width
		h = int(math.RoundToEven(float64(w) / lo))
	case in > hi:
		h = height
		w = int(math.RoundToEven(float64(h) * hi))
	default:
		w, h = width, height
	}
	return (height - h) / 2, (width - w) / 2, h, w
}

// RandomHorizontalFlip mirrors the image with probability P (torchvision's default is 0.5).
type RandomHorizontalFlip struct{ P float64 }

// Apply flips when a uniform draw is below P, as torch.rand(1) < p.
func (t RandomHorizontalFlip) Apply(p *Plan, rng *rand.Rand) error {
	if rng.Float64() < t.P {
		p.Flip = !p.Flip
	}
	return nil
}

// Resize is torchvision's Resize: with Height == 0 the shorter side becomes Width and the longer
// int(Width*long/short); otherwise the image becomes Width×Height. Bilinear with antialias.
type Resize struct{ Width, Height int }

// Apply plans the resize.
func (t Resize) Apply(p *Plan, _ *rand.Rand) error {
	w, h := p.Size()
	if t.Height > 0 {
		return p.ResizeTo(t.Width, t.Height)
	}
	if w <= h {
		return p.ResizeTo(t.Width, int(float64(t.Width)*float64(h)/float64(w)))
	}
	return p.ResizeTo(int(float64(t.Width)*float64(w)/float64(h)), t.Width)
}

// CenterCrop is torchvision's CenterCrop: offsets round half to even (Python's round), and a crop
// larger than the image is zero-padded.
type CenterCrop struct{ Width, Height int }

// Apply plans the crop.
func (t CenterCrop) Apply(p *Plan, _ *rand.Rand) error {
	w, h := p.Size()
	p.Crop(centerOffset(h, t.Height), centerOffset(w, t.Width), t.Height, t.Width)
	return nil
}

// ToTensor marks the conversion to float32 CHW in 0..1; every pipeline ends in one, so it is
// optional and accepted for symmetry with torchvision.
type ToTensor struct{}

// Apply does nothing: the conversion happens when the pipeline writes its output.
func (ToTensor) Apply(*Plan, *rand.Rand) error { return nil }

// Normalize subtracts Mean and divides by Std per channel, in float32 as torch does.
type Normalize struct{ Mean, Std [3]float32 }

// Apply does nothing to the geometry; Compose folds Normalize into the output lookup table.
func (Normalize) Apply(*Plan, *rand.Rand) error { return nil }

// Train returns torchvision's ImageNet training pipeline: RandomResizedCrop(size),
// RandomHorizontalFlip(0.5), ToTensor, Normalize(ImageNet mean, std).
func Train(size int) *Pipeline {
	p, _ := Compose(NewRandomResizedCrop(size), RandomHorizontalFlip{P: 0.5}, ToTensor{},
		Normalize{Mean: ImageNetMean, Std: ImageNetStd})
	return p
}

// Eval returns torchvision's ImageNet evaluation pipeline: Resize(resize), CenterCrop(size),
// ToTensor, Normalize (resize is 256 for size 224 in the reference scripts).
func Eval(resize, size int) *Pipeline {
	p, _ := Compose(Resize{Width: resize}, CenterCrop{Width: size, Height: size}, ToTensor{},
		Normalize{Mean: ImageNetMean, Std: ImageNetStd})
	return p
}

// centerOffset is torchvision's center_crop offset: round half to even inside the image, and when
// the crop is larger, the pad torchvision adds before the crop ((crop-size)//2 on the left/top).
func centerOffset(size, crop int) int {
	if crop > size {
		return -((crop - size) / 2)
	}
	return int(math.RoundToEven(float64(size-crop) / 2))
}
