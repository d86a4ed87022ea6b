package trainer

import (
	"context"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
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

// mixup and cutmix: the images are mixed with the batch's mirror (sample i with n-1-i) and
// the targets are the same mixture of the smoothed one-hots; every row sums to 1; the draw
// depends only on (seed, rank, position).
func TestMixer(t *testing.T) {
	const n, c, h, w, k, smoothing = 4, 3, 8, 8, 5, 0.1
	batch := func() *data.Batch {
		b := &data.Batch{N: n, C: c, H: h, W: w, Images: make([]float32, n*c*h*w), Labels: []int64{0, 1, 2, 4}}
		for i := range n {
			for j := range c * h * w {
				b.Images[i*c*h*w+j] = float32(i + 1) // sample i is the constant i+1
			}
		}
		return b
	}
	for _, tc := range []struct {
		name string
		args []string
		cut  bool
	}{
		{"-mixup 0.4", []string{"-mixup", "0.4"}, false},
		{"-cutmix 1", []string{"-cutmix", "1"}, true},
		{"-mixup 0.4 -cutmix 1 -mixup-switch-prob 1", []string{"-mixup", "0.4", "-cutmix", "1", "-mixup-switch-prob", "1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseConfig(t, append([]string{"-label-smoothing", "0.1"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			cfg.NumClasses = k
			m := newMixer(settingsOf(t, cfg), 0)
			lams := map[float64]bool{}
			for pos := range int64(20) {
				b := batch()
				targets, lam := m.mix(b, pos)
				lams[lam] = true
				for i := range n {
					j := n - 1 - i
					own, other := 0, 0
					for _, v := range b.Images[i*c*h*w : (i+1)*c*h*w] {
						switch {
						case tc.cut && v == float32(i+1):
							own++
						case tc.cut && v == float32(j+1):
							other++
						case !tc.cut:
							if want := float32(lam*float64(i+1) + (1-lam)*float64(j+1)); math.Abs(float64(v-want)) > 1e-5 {
								t.Fatalf("pos %d sample %d: pixel %v, want %v (λ %.4f)", pos, i, v, want, lam)
							}
						default:
							t.Fatalf("pos %d sample %d: pixel %v from neither sample %d nor %d", pos, i, v, i, j)
						}
					}
					if tc.cut && i != j {
						near(t, "cutmix λ against the pixels kept", float64(own)/float64(own+other), lam, 1e-9)
					}
					row := targets[i*k : (i+1)*k]
					var sum float64
					for cl, v := range row {
						want := smoothing / k
						if int64(cl) == b.Labels[i] {
							want += lam * (1 - smoothing)
						}
						if int64(cl) == b.Labels[j] {
							want += (1 - lam) * (1 - smoothing)
						}
						if math.Abs(float64(v)-want) > 1e-6 {
							t.Fatalf("pos %d sample %d class %d: target %v, want %v", pos, i, cl, v, want)
						}
						sum += float64(v)
					}
					near(t, "target row sum", sum, 1, 1e-5)
				}
				b2 := batch()
				if t2, lam2 := m.mix(b2, pos); lam2 != lam || t2[0] != targets[0] {
					t.Fatalf("pos %d drawn twice: λ %v then %v", pos, lam, lam2)
				}
			}
			if len(lams) < 10 {
				t.Fatalf("%d distinct λ in 20 batches", len(lams))
			}
		})
	}
}

// fakeProgram records what the stepper calls, with noSync marking the runs inside it.
type fakeProgram struct {
	calls  []string
	inside bool
	grads  []float32
}

func (p *fakeProgram) Run(context.Context) error {
	if p.inside {
		p.calls = append(p.calls, "run(nosync)")
	} else {
		p.calls = append(p.calls, "run")
	}
	for i := range p.grads {
		p.grads[i] += 1 // every batch adds a gradient of 1
	}
	return nil
}
func (p *fakeProgram) Step(context.Context) error {
	p.calls = append(p.calls, "step")
	return nil
}
func (p *fakeProgram) ZeroGrad() error                  { p.calls = append(p.calls, "zero"); return nil }
func (p *fakeProgram) SetInput(string, []float32) error { return nil }
func (p *fakeProgram) Output(string) ([]float32, error) { return nil, nil }
func (p *fakeProgram) LossValue() (float32, error)      { return 1, nil }
func (p *fakeProgram) Close() error                     { return nil }
func (p *fakeProgram) noSync(fn func() error) (err error) {
	p.inside = true
	err = fn()
	p.inside = false
	return
}

// -grad-accum-steps A: A runs per optimizer step, all but the last without gradient
// synchronisation (DDP's NoSync) where the strategy has it, and the step sees the mean of
// the A gradients.
func TestGradAccumStepper(t *testing.T) {
	for _, tc := range []struct {
		name   string
		accum  int
		noSync bool
		want   string
		grad   float32
	}{
		{"off", 1, true, "run step", 1}, // fused: train.RunStep runs then steps
		{"ddp 3", 3, true, "run(nosync) run(nosync) run step", 1},
		{"zero3 2", 2, false, "run run step", 1}, // no NoSync: every run reduces
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProgram{grads: make([]float32, 4)}
			s := &stepper{prog: p, grads: func() []float32 { return p.grads }, accum: tc.accum}
			if tc.noSync {
				s.noSync = p.noSync
			}
			b := &data.Batch{N: 1, C: 1, H: 1, W: 1, Images: []float32{0}, Labels: []int64{0}}
			var seen []float32
			for i := range tc.accum {
				if _, err := s.run(context.Background(), b, micro{pos: int64(i), last: i == tc.accum-1}); err != nil {
					t.Fatal(err)
				}
			}
			if !s.fused() {
				// What Step would see: run RunStep's place of update.
				if err := s.update(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			seen = p.grads
			if got := strings.Join(p.calls, " "); got != tc.want {
				t.Fatalf("calls %q, want %q", got, tc.want)
			}
			if seen[0] != tc.grad {
				t.Fatalf("gradient at the step %v, want the mean %v", seen[0], tc.grad)
			}
		})
	}
}

// -warmup-lr and -min-lr: the cosine schedule starts its warmup at -warmup-lr, reaches -lr
// after the warmup and ends at -min-lr; without -warmup-lr the warmup starts at 1% of -lr.
func TestScheduleWarmupAndMinLR(t *testing.T) {
	for _, tc := range []struct {
		name              string
		args              []string
		first, peak, last float64
	}{
		{"warmup-lr min-lr", []string{"-warmup-lr", "0.001", "-min-lr", "0.01"}, 0.001, 0.1, 0.01},
		{"defaults", nil, 0.001, 0.1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, append([]string{"-lr", "0.1", "-sched", "cosine", "-warmup-epochs", "2", "-epochs", "10"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			ps := []float32{0}
			opt, err := optim.NewSGD([]optim.Segment{{Name: "w", Data: ps, Grad: make([]float32, 1)}}, c.LR)
			if err != nil {
				t.Fatal(err)
			}
			const spe = 5
			sched, err := newSchedule(opt, settingsOf(t, c), spe)
			if err != nil {
				t.Fatal(err)
			}
			near(t, "lr at step 0", opt.LR(), tc.first, 1e-9)
			lrs := []float64{opt.LR()}
			for range 10 * spe {
				sched.Step()
				lrs = append(lrs, opt.LR())
			}
			near(t, "lr after the warmup", lrs[2*spe], tc.peak, 1e-9)
			near(t, "lr at the last step", lrs[10*spe], tc.last, 1e-9)
		})
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

// -model-ema: the average follows ema = d·ema + (1-d)·w over parameters and float buffers,
// swaps in and out exactly, and survives a checkpoint's state dict.
func TestModelEMA(t *testing.T) {
	ps := &nn.ParamSet{Data: []float32{1, 2}, Buffers: []*nn.Buffer{{Name: "bn.running_mean", Data: []float32{4}}}}
	e := newModelEMA(ps, 0.5)
	ps.Data[0], ps.Data[1], ps.Buffers[0].Data[0] = 3, 2, 0
	e.update() // (1,2,4) and (3,2,0) at d=0.5: (2,2,2)
	var got []float32
	if err := e.swapped(func() error {
		got = append(append(got, ps.Data...), ps.Buffers[0].Data...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []float32{2, 2, 2}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("average %v, want %v", got, want)
	}
	if ps.Data[0] != 3 || ps.Buffers[0].Data[0] != 0 {
		t.Fatalf("trained weights %v %v after the swap back, want 3 0", ps.Data, ps.Buffers[0].Data)
	}
	st := e.stateful(noState{})
	entries := st.StateDict()
	e2 := newModelEMA(ps, 0.5) // starts at (3,2,0)
	if err := e2.stateful(noState{}).LoadStateDict(entries); err != nil {
		t.Fatal(err)
	}
	if e2.params[0] != 2 || e2.buffers[0] != 2 {
		t.Fatalf("restored average %v %v, want 2 2", e2.params, e2.buffers)
	}
	if _, err := parseConfig(t, "-model-ema", "-model-ema-decay", "1"); err == nil {
		t.Fatal("-model-ema-decay 1 accepted")
	}
}

type noState struct{}

func (noState) StateDict() []nn.StateEntry          { return nil }
func (noState) LoadStateDict([]nn.StateEntry) error { return nil }

// -sched onecycle, poly and constant: the learning rate at the first step, its peak and at
// the last step of 10 epochs of 5 steps, as PyTorch's OneCycleLR (from -lr/25 up to -lr
// after 30% of the steps, down to -lr/25/1e4), PolynomialLR (power 2 after a 2-epoch
// warmup: 0 at the end) and ConstantLR (-lr held after the warmup) give them. OneCycleLR's
// final rate is that of the last step taken (step 49; PyTorch's step 50 would lie past it).
func TestSchedulesOfPyTorchUsers(t *testing.T) {
	for _, tc := range []struct {
		name              string
		args              []string
		first, peak, last float64
		peakAt, lastAt    int
	}{
		{"onecycle", []string{"-sched", "onecycle", "-warmup-epochs", "0"}, 0.1 / 25, 0.1, 0.1 / 25 / 1e4, 14, 49},
		{"poly", []string{"-sched", "poly", "-poly-power", "2", "-warmup-epochs", "2"}, 0.001, 0.1, 0, 10, 50},
		{"constant", []string{"-sched", "constant", "-warmup-epochs", "2"}, 0.001, 0.1, 0.1, 10, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(t, append([]string{"-lr", "0.1", "-epochs", "10", "-opt", "sgd", "-momentum", "0.9"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			opt, err := optim.NewSGD([]optim.Segment{{Name: "w", Data: []float32{0}, Grad: make([]float32, 1)}}, c.LR, optim.WithMomentum(0.9))
			if err != nil {
				t.Fatal(err)
			}
			const spe = 5
			sched, err := newSchedule(opt, settingsOf(t, c), spe)
			if err != nil {
				t.Fatal(err)
			}
			lrs := []float64{opt.LR()}
			for range 10 * spe {
				sched.Step()
				lrs = append(lrs, opt.LR())
			}
			near(t, "lr at step 0", lrs[0], tc.first, 1e-9)
			near(t, "lr at the peak", lrs[tc.peakAt], tc.peak, 1e-9)
			near(t, "lr at the last step", lrs[tc.lastAt], tc.last, 1e-12)
		})
	}
	if _, err := parseConfig(t, "-sched", "onecycle", "-warmup-epochs", "3", "-epochs", "10"); err == nil || !strings.Contains(err.Error(), "-sched onecycle has its own rise") {
		t.Errorf("-sched onecycle with a warmup: %v", err)
	}
	if _, err := parseConfig(t, "-sched", "exp"); err == nil || !strings.Contains(err.Error(), "unknown -sched \"exp\" (step, cosine, onecycle, poly or constant)") {
		t.Errorf("-sched exp: %v", err)
	}
}

// settingsOf is the Trainer settings of a Config the recipe has filled in.
func settingsOf(t *testing.T, c *Config) *settings {
	t.Helper()
	tr, err := New(c.options(io.Discard)...)
	if err != nil {
		t.Fatal(err)
	}
	return &tr.s
}
