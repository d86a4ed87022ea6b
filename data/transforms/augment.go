package transforms

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// RandomCrop is torchvision's RandomCrop(size, padding): the virtual image is padded with
// Padding zero pixels on every side, then a Width×Height crop at a uniformly random offset is
// kept (the CIFAR recipe: RandomCrop(32, padding=4)). The padding is black (pixel value 0),
// as torchvision's default fill.
type RandomCrop struct {
	Width, Height int
	Padding       int
}

// Apply samples the offset (top, then left, as torch.randint in get_params) and plans the
// crop; a crop larger than the padded image is an error.
func (t RandomCrop) Apply(p *Plan, rng *rand.Rand) error {
	w, h := p.Size()
	pw, ph := w+2*t.Padding, h+2*t.Padding
	if t.Width <= 0 || t.Height <= 0 || t.Width > pw || t.Height > ph {
		return fmt.Errorf("random crop %dx%d of a %dx%d image padded by %d: %w", t.Width, t.Height, w, h, t.Padding, ErrCompose)
	}
	top := rng.IntN(ph-t.Height+1) - t.Padding
	left := rng.IntN(pw-t.Width+1) - t.Padding
	p.Crop(top, left, t.Height, t.Width)
	return nil
}

// RandomVerticalFlip mirrors the image top-bottom with probability P.
type RandomVerticalFlip struct{ P float64 }

// Apply flips when a uniform draw is below P.
func (t RandomVerticalFlip) Apply(p *Plan, rng *rand.Rand) error {
	if rng.Float64() < t.P {
		p.FlipV = !p.FlipV
	}
	return nil
}

// ColorJitter is torchvision's ColorJitter(brightness, contrast, saturation, hue): factors
// drawn uniformly from [max(0, 1-x), 1+x] (hue: a shift in [-Hue, Hue] turns, Hue <= 0.5),
// applied in a random order. It works on the output's 0..1 values in float32, as torchvision
// does on float tensors (on PIL images it rounds to uint8 after each adjustment).
type ColorJitter struct {
	Brightness, Contrast, Saturation, Hue float64
}

// Apply draws the order and the factors (torchvision's get_params) into the plan; the
// pipeline applies them to the pixels after resampling.
func (t ColorJitter) Apply(p *Plan, rng *rand.Rand) error {
	if t.Brightness < 0 || t.Contrast < 0 || t.Saturation < 0 || t.Hue < 0 || t.Hue > 0.5 {
		return fmt.Errorf("color jitter %+v: want factors >= 0 and hue in [0, 0.5]: %w", t, ErrCompose)
	}
	j := Jitter{Order: [4]int{0, 1, 2, 3}, Brightness: 1, Contrast: 1, Saturation: 1}
	perm := rng.Perm(4)
	copy(j.Order[:], perm)
	factor := func(x float64) float64 {
		if x == 0 {
			return 1
		}
		lo := max(0, 1-x)
		return lo + (1+x-lo)*rng.Float64()
	}
	j.Brightness = factor(t.Brightness)
	j.Contrast = factor(t.Contrast)
	j.Saturation = factor(t.Saturation)
	if t.Hue > 0 {
		j.Hue = -t.Hue + 2*t.Hue*rng.Float64()
	}
	p.Jitter = &j
	return nil
}

// Jitter is one sample's colour adjustment: Order lists brightness (0), contrast (1),
// saturation (2) and hue (3) in the order they apply; a factor of 1 (hue 0) does nothing.
type Jitter struct {
	Order                            [4]int
	Brightness, Contrast, Saturation float64
	Hue                              float64 // shift in turns
}

// apply adjusts the CHW planes r, g, b (values in 0..1).
func (j *Jitter) apply(r, g, b []float32) {
	for _, op := range j.Order {
		switch op {
		case 0:
			if j.Brightness != 1 {
				f := float32(j.Brightness)
				for i := range r {
					r[i], g[i], b[i] = clamp01(r[i]*f), clamp01(g[i]*f), clamp01(b[i]*f)
				}
			}
		case 1:
			if j.Contrast != 1 {
				// torchvision: blend with the mean of the grayscale image.
				var sum float64
				for i := range r {
					sum += float64(gray(r[i], g[i], b[i]))
				}
				m := float32(sum / float64(len(r)))
				f := float32(j.Contrast)
				for i := range r {
					r[i], g[i], b[i] = blend(r[i], m, f), blend(g[i], m, f), blend(b[i], m, f)
				}
			}
		case 2:
			if j.Saturation != 1 {
				f := float32(j.Saturation)
				for i := range r {
					y := gray(r[i], g[i], b[i])
					r[i], g[i], b[i] = blend(r[i], y, f), blend(g[i], y, f), blend(b[i], y, f)
				}
			}
		case 3:
			if j.Hue != 0 {
				for i := range r {
					r[i], g[i], b[i] = shiftHue(r[i], g[i], b[i], j.Hue)
				}
			}
		}
	}
}

// gray is ITU-R 601-2 luma, as torchvision's rgb_to_grayscale.
func gray(r, g, b float32) float32 { return 0.299*r + 0.587*g + 0.114*b }

// blend is torchvision's _blend: f·x + (1-f)·y clamped to 0..1.
func blend(x, y, f float32) float32 { return clamp01(f*x + (1-f)*y) }

func clamp01(x float32) float32 { return min(max(x, 0), 1) }

// shiftHue rotates the hue by shift turns through HSV, as torchvision's adjust_hue.
func shiftHue(r, g, b float32, shift float64) (float32, float32, float32) {
	mx, mn := max(r, g, b), min(r, g, b)
	v := float64(mx)
	d := float64(mx - mn)
	if d == 0 {
		return r, g, b // grey: no hue
	}
	s := d / v
	var h float64
	switch mx {
	case r:
		h = math.Mod((float64(g)-float64(b))/d, 6)
	case g:
		h = (float64(b)-float64(r))/d + 2
	default:
		h = (float64(r)-float64(g))/d + 4
	}
	h = math.Mod(h/6+shift+2, 1) * 6
	i := math.Floor(h)
	f := h - i
	p, q, t := v*(1-s), v*(1-s*f), v*(1-s*(1-f))
	var ro, gn, bo float64
	switch int(i) % 6 {
	case 0:
		ro, gn, bo = v, t, p
	case 1:
		ro, gn, bo = q, v, p
	case 2:
		ro, gn, bo = p, v, t
	case 3:
		ro, gn, bo = p, q, v
	case 4:
		ro, gn, bo = t, p, v
	default:
		ro, gn, bo = v, p, q
	}
	return float32(ro), float32(gn), float32(bo)
}

// finish applies what the plan asks of the written output dst (CHW, normalised through
// mean and std): the vertical flip, then the colour jitter.
func (p *Pipeline) finish(pl *Plan, w, h int, dst []float32) {
	plane := w * h
	if pl.FlipV {
		for c := range 3 {
			ch := dst[c*plane : (c+1)*plane]
			for y := 0; y < h/2; y++ {
				a, b := ch[y*w:(y+1)*w], ch[(h-1-y)*w:(h-y)*w]
				for x := range a {
					a[x], b[x] = b[x], a[x]
				}
			}
		}
	}
	if pl.Jitter == nil {
		return
	}
	planes := [3][]float32{dst[:plane], dst[plane : 2*plane], dst[2*plane : 3*plane]}
	for c, ch := range planes {
		m, s := p.mean[c], p.std[c]
		for i, v := range ch {
			ch[i] = v*s + m
		}
	}
	pl.Jitter.apply(planes[0], planes[1], planes[2])
	for c, ch := range planes {
		m, s := p.mean[c], p.std[c]
		for i, v := range ch {
			ch[i] = (v - m) / s
		}
	}
}
