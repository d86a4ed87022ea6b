package trainer

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

// Augment is the training augmentation, with timm's flag names. A negative field (the
// flags' default) takes the preset's value, and so does a zero Scale or Ratio; the zero
// Augment is the "imagenet" preset.
type Augment struct {
	// Preset is the data-set kind whose recipe fills the fields left unset:
	//   - imagenet: RandomResizedCrop (scale 0.08–1, ratio 3/4–4/3), horizontal flip 0.5;
	//     validation resizes the shorter side to ImageSize·8/7 and centre-crops;
	//   - small (CIFAR, Fashion-MNIST: images about the size of the crop): Resize to
	//     ImageSize, RandomCrop(ImageSize, padding ImageSize/8), horizontal flip 0.5;
	//     validation resizes to ImageSize.
	Preset       string
	Scale, Ratio [2]float64 // RandomResizedCrop's area fraction and aspect ratio (timm --scale, --ratio)
	// CropPad > 0 replaces RandomResizedCrop with torchvision's RandomCrop(ImageSize,
	// padding=CropPad) after a resize to ImageSize; 0 turns it off.
	CropPad      int
	HFlip, VFlip float64 // flip probabilities (timm --hflip, --vflip)
	// ColorJitter is torchvision's ColorJitter(x, x, x) (brightness, contrast, saturation),
	// as timm's --color-jitter; 0 is off.
	ColorJitter float64
	// Mixup and Cutmix are the Beta(α, α) parameters of mixup and cutmix (0: off); with both,
	// a batch takes cutmix with probability MixupSwitchProb. A batch is mixed at all with
	// probability MixupProb (0 means 1). The loss then takes soft targets (label smoothing
	// folded in), as timm's Mixup with SoftTargetCrossEntropy.
	Mixup, Cutmix              float64
	MixupProb, MixupSwitchProb float64
}

// RegisterFlags binds a's fields to timm's flag names.
func (a *Augment) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.Preset, "preset", "imagenet", "augmentation recipe for the data-set kind: imagenet | small (32x32-like images)")
	fs.Var(pairFlag{&a.Scale}, "scale", "random-resized-crop area fraction LO,HI (unset: the preset's, 0.08,1)")
	fs.Var(pairFlag{&a.Ratio}, "ratio", "random-resized-crop aspect ratio LO,HI (unset: the preset's, 0.75,1.333)")
	fs.IntVar(&a.CropPad, "crop-pad", -1, "padded random crop with N pixels of padding instead of random-resized-crop, 0 off; -1: the preset's (small: image-size/8)")
	fs.Float64Var(&a.HFlip, "hflip", -1, "horizontal flip probability; -1: the preset's (0.5)")
	fs.Float64Var(&a.VFlip, "vflip", -1, "vertical flip probability; -1: the preset's (0)")
	fs.Float64Var(&a.ColorJitter, "color-jitter", -1, "colour jitter of brightness, contrast and saturation, 0 off; -1: the preset's (0)")
	fs.Float64Var(&a.Mixup, "mixup", 0, "mixup alpha, 0 off")
	fs.Float64Var(&a.Cutmix, "cutmix", 0, "cutmix alpha, 0 off")
	fs.Float64Var(&a.MixupProb, "mixup-prob", 1, "probability of mixing a batch (mixup or cutmix)")
	fs.Float64Var(&a.MixupSwitchProb, "mixup-switch-prob", 0.5, "probability of cutmix instead of mixup when both are on")
}

// resolve fills a from its preset (see Augment) and checks it; synthetic data keeps more
// of each image under random-resized-crop (scale 0.35–1) so that its small objects survive.
func (a *Augment) resolve(dataFormat string, imageSize int) error {
	if *a == (Augment{Preset: a.Preset}) {
		*a = Augment{Preset: a.Preset, CropPad: -1, HFlip: -1, VFlip: -1, ColorJitter: -1}
	}
	def := Augment{Scale: [2]float64{0.08, 1}, Ratio: [2]float64{3.0 / 4, 4.0 / 3}, HFlip: 0.5}
	switch a.Preset {
	case "", "imagenet":
		a.Preset = "imagenet"
		if dataFormat == "synthetic" {
			def.Scale[0] = 0.35
		}
	case "small":
		def.CropPad = max(1, imageSize/8)
	default:
		return fmt.Errorf("trainer: unknown -preset %q (imagenet or small)", a.Preset)
	}
	if a.Scale == [2]float64{} {
		a.Scale = def.Scale
	}
	if a.Ratio == [2]float64{} {
		a.Ratio = def.Ratio
	}
	fill := func(v *float64, d float64) {
		if *v < 0 {
			*v = d
		}
	}
	fill(&a.HFlip, def.HFlip)
	fill(&a.VFlip, def.VFlip)
	fill(&a.ColorJitter, def.ColorJitter)
	if a.CropPad < 0 {
		a.CropPad = def.CropPad
	}
	if a.MixupProb <= 0 {
		a.MixupProb = 1
	}
	if a.MixupSwitchProb < 0 {
		a.MixupSwitchProb = 0.5
	}
	switch {
	case !(a.Scale[0] > 0 && a.Scale[0] <= a.Scale[1] && a.Scale[1] <= 1):
		return fmt.Errorf("trainer: -scale %g,%g: want 0 < lo <= hi <= 1", a.Scale[0], a.Scale[1])
	case !(a.Ratio[0] > 0 && a.Ratio[0] <= a.Ratio[1]):
		return fmt.Errorf("trainer: -ratio %g,%g: want 0 < lo <= hi", a.Ratio[0], a.Ratio[1])
	case a.HFlip > 1 || a.VFlip > 1 || a.MixupProb > 1 || a.MixupSwitchProb > 1:
		return fmt.Errorf("trainer: probabilities -hflip %g -vflip %g -mixup-prob %g -mixup-switch-prob %g: want them in [0, 1]",
			a.HFlip, a.VFlip, a.MixupProb, a.MixupSwitchProb)
	case a.Mixup < 0 || a.Cutmix < 0:
		return fmt.Errorf("trainer: -mixup %g -cutmix %g: want alphas >= 0", a.Mixup, a.Cutmix)
	case a.CropPad > imageSize:
		return fmt.Errorf("trainer: -crop-pad %d is more than the image size %d", a.CropPad, imageSize)
	}
	return nil
}

// mixing reports whether batches are mixed (the loss then takes soft targets).
func (a *Augment) mixing() bool { return a.Mixup > 0 || a.Cutmix > 0 }

// trainTransform is the training pipeline cfg.Augment describes, ending in ImageNet's
// normalisation.
func trainTransform(cfg *Config) (*transforms.Pipeline, error) {
	a, size := &cfg.Augment, cfg.ImageSize
	var ts []transforms.Transform
	if a.CropPad > 0 {
		ts = append(ts, transforms.Resize{Width: size},
			transforms.RandomCrop{Width: size, Height: size, Padding: a.CropPad})
	} else {
		ts = append(ts, &transforms.RandomResizedCrop{Width: size, Height: size, Scale: a.Scale, Ratio: a.Ratio})
	}
	if a.HFlip > 0 {
		ts = append(ts, transforms.RandomHorizontalFlip{P: a.HFlip})
	}
	if a.VFlip > 0 {
		ts = append(ts, transforms.RandomVerticalFlip{P: a.VFlip})
	}
	if a.ColorJitter > 0 {
		j := a.ColorJitter
		ts = append(ts, transforms.ColorJitter{Brightness: j, Contrast: j, Saturation: j})
	}
	ts = append(ts, transforms.ToTensor{}, transforms.Normalize{Mean: transforms.ImageNetMean, Std: transforms.ImageNetStd})
	p, err := transforms.Compose(ts...)
	if err != nil {
		return nil, fmt.Errorf("trainer: training transform: %w", err)
	}
	return p, nil
}

// evalTransform is the validation pipeline of cfg.Augment's preset.
func evalTransform(cfg *Config) *transforms.Pipeline {
	if cfg.Augment.Preset == "small" {
		return transforms.Eval(cfg.ImageSize, cfg.ImageSize)
	}
	return transforms.Eval(cfg.ImageSize*8/7, cfg.ImageSize)
}

// mixer is timm's Mixup (mode "batch"): one λ per batch, each sample mixed with the sample
// at the mirrored position (the batch flipped), soft targets with label smoothing.
type mixer struct {
	a         *Augment
	classes   int
	smoothing float64
	seed      uint64
	rank      int
	targets   []float32
	swap      []float32
}

// mix mixes b's images in place for the microbatch at position pos of the run (a global
// counter: the draw depends only on seed, rank and pos, so that a resumed run mixes as the
// interrupted one did) and returns the soft targets [b.N, classes]; lam is the share of
// each sample's own image (1 when the batch was left unmixed).
func (m *mixer) mix(b *data.Batch, pos int64) (targets []float32, lam float64) {
	rng := rand.New(rand.NewPCG(m.seed^0x6d69787570, uint64(pos)<<16|uint64(m.rank)))
	lam = 1
	cut := false
	if rng.Float64() < m.a.MixupProb {
		switch {
		case m.a.Mixup > 0 && m.a.Cutmix > 0:
			cut = rng.Float64() < m.a.MixupSwitchProb
		case m.a.Cutmix > 0:
			cut = true
		}
		alpha := m.a.Mixup
		if cut {
			alpha = m.a.Cutmix
		}
		lam = betaSample(rng, alpha)
	}
	n, plane := b.N, b.H*b.W
	img := b.Images[:n*b.C*plane]
	if lam < 1 {
		// The flipped batch, read before any sample is overwritten.
		m.swap = append(m.swap[:0], img...)
		per := b.C * plane
		if cut {
			y0, y1, x0, x1 := cutBox(rng, b.H, b.W, lam)
			lam = 1 - float64((y1-y0)*(x1-x0))/float64(plane) // timm's correct_lam
			for i := range n {
				j := n - 1 - i
				for c := range b.C {
					for y := y0; y < y1; y++ {
						o := i*per + c*plane + y*b.W
						s := j*per + c*plane + y*b.W
						copy(img[o+x0:o+x1], m.swap[s+x0:s+x1])
					}
				}
			}
		} else {
			l := float32(lam)
			for i := range n {
				j := n - 1 - i
				dst, src := img[i*per:(i+1)*per], m.swap[j*per:(j+1)*per]
				for k := range dst {
					dst[k] = l*dst[k] + (1-l)*src[k]
				}
			}
		}
	}
	k := m.classes
	if cap(m.targets) < n*k {
		m.targets = make([]float32, n*k)
	}
	t := m.targets[:n*k]
	off := m.smoothing / float64(k)
	on := 1 - m.smoothing + off
	for i := range n {
		row := t[i*k : (i+1)*k]
		for c := range row {
			row[c] = float32(off)
		}
		row[b.Labels[i]] += float32(lam * (on - off))
		row[b.Labels[n-1-i]] += float32((1 - lam) * (on - off))
	}
	return t, lam
}

// cutBox is timm's rand_bbox: a box of (1-λ) of the area (side ratio sqrt(1-λ)), centred
// uniformly, clipped to the image; it returns rows [y0, y1) and columns [x0, x1).
func cutBox(rng *rand.Rand, h, w int, lam float64) (y0, y1, x0, x1 int) {
	r := math.Sqrt(1 - lam)
	ch, cw := int(float64(h)*r), int(float64(w)*r)
	cy, cx := rng.IntN(h), rng.IntN(w)
	clip := func(v, hi int) int { return min(max(v, 0), hi) }
	return clip(cy-ch/2, h), clip(cy+ch/2, h), clip(cx-cw/2, w), clip(cx+cw/2, w)
}

// betaSample draws from Beta(α, α) as the ratio of two Gamma(α) draws.
func betaSample(rng *rand.Rand, alpha float64) float64 {
	x, y := gammaSample(rng, alpha), gammaSample(rng, alpha)
	if x+y == 0 {
		return 0.5
	}
	return x / (x + y)
}

// gammaSample draws from Gamma(α, 1) by Marsaglia and Tsang's method (α < 1 through
// Gamma(α+1)·U^(1/α)).
func gammaSample(rng *rand.Rand, alpha float64) float64 {
	if alpha < 1 {
		return gammaSample(rng, alpha+1) * math.Pow(rng.Float64(), 1/alpha)
	}
	d := alpha - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// pairFlag is a flag of two numbers written "LO,HI" (timm's nargs=2 --scale and --ratio).
type pairFlag struct{ p *[2]float64 }

func (f pairFlag) String() string {
	if f.p == nil || *f.p == [2]float64{} {
		return ""
	}
	return fmt.Sprintf("%g,%g", f.p[0], f.p[1])
}

func (f pairFlag) Set(v string) error {
	parts := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
	if len(parts) != 2 {
		return fmt.Errorf("want two numbers LO,HI, got %q", v)
	}
	for i, s := range parts {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("want two numbers LO,HI, got %q", v)
		}
		f.p[i] = x
	}
	return nil
}

// newMixer is the mixer of cfg's -mixup and -cutmix on rank, nil when neither is on.
func newMixer(cfg *Config, rank int) *mixer {
	if !cfg.Augment.mixing() {
		return nil
	}
	return &mixer{a: &cfg.Augment, classes: cfg.NumClasses, smoothing: cfg.Smoothing, seed: uint64(cfg.Seed), rank: rank}
}
