package main

import (
	"github.com/gorgonia-parallel/gp/trainer"

	"flag"
	"fmt"
	"strconv"
	"strings"

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

// mixup is the batch mixing of the augmentation flags.
func (a *Augment) mixup() trainer.Mixup {
	return trainer.Mixup{Mixup: a.Mixup, Cutmix: a.Cutmix, Prob: a.MixupProb, SwitchProb: a.MixupSwitchProb}
}

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
