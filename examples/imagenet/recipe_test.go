package main

import (
	"flag"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/models/swin"
)

// parseConfig parses args as the command line does and applies the recipe.
func parseConfig(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	var c Config
	fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return &c, c.recipe()
}

// PyTorch main.py's long names are aliases of the short ones.
func TestFlagAliases(t *testing.T) {
	c, err := parseConfig(t, "--batch-size", "64", "--workers", "3", "--learning-rate", "0.2", "--weight-decay", "0.01")
	if err != nil {
		t.Fatal(err)
	}
	if c.Batch != 64 || c.Workers != 3 || c.LR != 0.2 || c.WeightDecay != 0.01 {
		t.Fatalf("batch %d workers %d lr %g wd %g, want 64 3 0.2 0.01", c.Batch, c.Workers, c.LR, c.WeightDecay)
	}
}

// Each augmentation flag and preset builds the transform it names: checked on the plans the
// pipeline draws for a 40×30 image over 400 samples.
func TestAugmentFlagsBuildTransforms(t *testing.T) {
	const draws = 400
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, pls []planInfo)
	}{
		{"imagenet preset", nil, func(t *testing.T, pls []planInfo) {
			flips := 0
			for _, p := range pls {
				if !p.resized || p.padded || p.vflip || p.jitter {
					t.Fatalf("plan %+v: want a random resized crop, no padding, vflip or jitter", p)
				}
				if p.area < 0.08-0.02 || p.area > 1 {
					t.Fatalf("crop area fraction %.3f outside 0.08..1", p.area)
				}
				if p.hflip {
					flips++
				}
			}
			near(t, "hflip rate", float64(flips)/draws, 0.5, 0.1)
		}},
		{"-scale -ratio", []string{"-scale", "0.5,0.6", "-ratio", "1,1"}, func(t *testing.T, pls []planInfo) {
			for _, p := range pls {
				if p.area < 0.5-0.03 || p.area > 0.6+0.03 || math.Abs(p.aspect-1) > 0.1 {
					t.Fatalf("crop area %.3f aspect %.3f, want 0.5..0.6 and 1", p.area, p.aspect)
				}
			}
		}},
		{"-hflip 0 -vflip 1", []string{"-hflip", "0", "-vflip", "1"}, func(t *testing.T, pls []planInfo) {
			for _, p := range pls {
				if p.hflip || !p.vflip {
					t.Fatalf("plan %+v: want every image flipped vertically, none horizontally", p)
				}
			}
		}},
		{"-color-jitter 0.4", []string{"-color-jitter", "0.4"}, func(t *testing.T, pls []planInfo) {
			for _, p := range pls {
				if !p.jitter || p.brightness < 0.6 || p.brightness > 1.4 {
					t.Fatalf("plan %+v: want a jitter with brightness in 0.6..1.4", p)
				}
			}
		}},
		{"small preset", []string{"-preset", "small"}, func(t *testing.T, pls []planInfo) {
			// Resize to 16 on the short side, RandomCrop(16, padding 2): the window moves up
			// to 2 pixels beyond the resized image.
			padded := 0
			for _, p := range pls {
				if p.w != 16 || p.h != 16 || p.area != 1 {
					t.Fatalf("plan %+v: want a 16x16 window over the whole image", p)
				}
				if p.padded {
					padded++
				}
				if p.overhang > 2 {
					t.Fatalf("window %d pixels beyond the image, want at most the padding 2", p.overhang)
				}
			}
			if padded == 0 {
				t.Fatal("no crop reached into the padding")
			}
		}},
		{"-crop-pad 3", []string{"-crop-pad", "3"}, func(t *testing.T, pls []planInfo) {
			max := 0
			for _, p := range pls {
				max = maxInt(max, p.overhang)
			}
			if max != 3 {
				t.Fatalf("largest overhang %d, want the padding 3", max)
			}
		}},
		{"small preset, -crop-pad 0", []string{"-preset", "small", "-crop-pad", "0"}, func(t *testing.T, pls []planInfo) {
			for _, p := range pls {
				if p.padded || p.area == 1 && p.aspect != 40.0/30 {
					t.Fatalf("plan %+v: want random resized crops", p)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, append([]string{"-image-size", "16"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			p, err := trainTransform(c)
			if err != nil {
				t.Fatal(err)
			}
			var pls []planInfo
			for i := range uint64(draws) {
				pl, err := p.Plan(40, 30, rand.New(rand.NewPCG(i, 7)))
				if err != nil {
					t.Fatal(err)
				}
				info := planInfo{w: pl.Win.Dx(), h: pl.Win.Dy(), resized: pl.Resized,
					hflip: pl.Flip, vflip: pl.FlipV, jitter: pl.Jitter != nil,
					area:   float64(pl.Box.Dx()*pl.Box.Dy()) / (40 * 30),
					aspect: float64(pl.Box.Dx()) / float64(pl.Box.Dy())}
				info.overhang = maxInt(-pl.Win.Min.X, -pl.Win.Min.Y, pl.Win.Max.X-pl.OutW, pl.Win.Max.Y-pl.OutH, 0)
				info.padded = info.overhang > 0
				if pl.Jitter != nil {
					info.brightness = pl.Jitter.Brightness
				}
				pls = append(pls, info)
			}
			tc.check(t, pls)
		})
	}
	for _, bad := range [][]string{{"-preset", "cifar"}, {"-scale", "0.5"}, {"-scale", "0.9,0.5"}, {"-hflip", "2"}, {"-crop-pad", "40"}} {
		if _, err := parseConfig(t, append([]string{"-image-size", "16"}, bad...)...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The presets' validation transforms: ImageNet's resize to 8/7 and centre crop, the small
// preset's plain resize.
func TestEvalTransformPerPreset(t *testing.T) {
	for _, tc := range []struct {
		preset string
		box    int // side of the source square the output is resampled from
	}{{"imagenet", 56}, {"small", 64}} {
		c, err := parseConfig(t, "-image-size", "16", "-preset", tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := evalTransform(c).Plan(64, 64, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		// imagenet: 64 → 18, crop 16: 16/18 of 64 ≈ 56.9 source pixels.
		if got := float64(pl.Win.Dx()) / float64(pl.OutW) * 64; pl.Win.Dx() != 16 || math.Abs(got-float64(tc.box)) > 1 {
			t.Errorf("%s: window %v of a %dx%d resize (%.1f source pixels), want 16 wide from %d", tc.preset, pl.Win, pl.OutW, pl.OutH, got, tc.box)
		}
	}
}

type planInfo struct {
	w, h                          int
	resized, padded, hflip, vflip bool
	jitter                        bool
	brightness                    float64
	area, aspect                  float64
	overhang                      int
}

func maxInt(xs ...int) int {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Fatalf("%s %.3f, want %.3f ± %.3f", what, got, want, tol)
	}
}

// -drop-path sets a Swin's stochastic depth (the last block's, rising from 0); a ResNet has
// none and refuses it.
func TestDropPath(t *testing.T) {
	c, err := parseConfig(t, "-arch", "swin_t", "-drop-path", "0.05")
	if err != nil {
		t.Fatal(err)
	}
	m, err := newModule(c)
	if err != nil {
		t.Fatal(err)
	}
	probs := m.(*swin.Swin).DropPathProbs()
	if probs[0] != 0 || math.Abs(probs[len(probs)-1]-0.05) > 1e-12 {
		t.Fatalf("drop-path probabilities %v, want 0 rising to 0.05", probs)
	}
	c, _ = parseConfig(t, "-arch", "swin_t")
	m, _ = newModule(c)
	if probs := m.(*swin.Swin).DropPathProbs(); probs[len(probs)-1] != 0.2 {
		t.Fatalf("swin_t's own stochastic depth %v, want 0.2", probs[len(probs)-1])
	}
	if _, err := parseConfig(t, "-arch", "resnet18", "-drop-path", "0.1"); err == nil || !strings.Contains(err.Error(), "no stochastic depth") {
		t.Fatalf("resnet18 with -drop-path: %v", err)
	}
}

// -model-ema-decay outside (0, 1), -sched onecycle with a warmup and an unknown -sched are
// refused naming the flag.
func TestRecipeRefusesBadSchedulesAndEMA(t *testing.T) {
	if _, err := parseConfig(t, "-model-ema", "-model-ema-decay", "1"); err == nil {
		t.Fatal("-model-ema-decay 1 accepted")
	}
	if _, err := parseConfig(t, "-sched", "onecycle", "-warmup-epochs", "3", "-epochs", "10"); err == nil || !strings.Contains(err.Error(), "-sched onecycle has its own rise") {
		t.Errorf("-sched onecycle with a warmup: %v", err)
	}
	if _, err := parseConfig(t, "-sched", "exp"); err == nil || !strings.Contains(err.Error(), "unknown -sched \"exp\" (step, cosine, onecycle, poly or constant)") {
		t.Errorf("-sched exp: %v", err)
	}
}

// -strategy zero3 -device cuda without -opt takes AdamW, the optimizer ZeRO-3 steps on the
// device; an explicit -opt stays.
func TestRecipeZero3OnDeviceTakesAdamW(t *testing.T) {
	c, err := parseConfig(t, "-strategy", "zero3", "-device", "cuda")
	if err != nil || c.Optimizer != "adamw" {
		t.Fatalf("-strategy zero3 -device cuda: -opt %q (%v), want adamw", c.Optimizer, err)
	}
	if c, err = parseConfig(t, "-strategy", "zero3", "-device", "cuda", "-opt", "sgd"); err != nil || c.Optimizer != "sgd" {
		t.Fatalf("-strategy zero3 -device cuda -opt sgd: -opt %q (%v), want sgd", c.Optimizer, err)
	}
}
