package trainer

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

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
		mix  Mixup
		cut  bool
	}{
		{"mixup 0.4", Mixup{Mixup: 0.4, Prob: 1, SwitchProb: 0.5}, false},
		{"cutmix 1", Mixup{Cutmix: 1, Prob: 1, SwitchProb: 0.5}, true},
		{"mixup 0.4 cutmix 1 switch prob 1", Mixup{Mixup: 0.4, Cutmix: 1, Prob: 1, SwitchProb: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMixer(settingsOf(t, WithLabelSmoothing(smoothing), WithMixup(tc.mix), WithClasses(k)), 0)
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
			s := &stepper{prog: p, grads: hostGrads(func() []float32 { return p.grads }), accum: tc.accum}
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

// WarmupLR and MinLR (-warmup-lr, -min-lr): the cosine schedule starts its warmup at
// WarmupLR, reaches the learning rate after the warmup and ends at MinLR; without WarmupLR
// the warmup starts at 1% of the learning rate.
func TestScheduleWarmupAndMinLR(t *testing.T) {
	for _, tc := range []struct {
		name              string
		sched             Schedule
		first, peak, last float64
	}{
		{"warmup-lr min-lr", Schedule{Name: "cosine", WarmupEpochs: 2, WarmupLR: 0.001, MinLR: 0.01}, 0.001, 0.1, 0.01},
		{"defaults", Schedule{Name: "cosine", WarmupEpochs: 2}, 0.001, 0.1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const lr = 0.1
			s := settingsOf(t, WithOptimizer(SGD(lr, 0.9)), WithSchedule(tc.sched), WithEpochs(10))
			ps := []float32{0}
			opt, err := optim.NewSGD([]optim.Segment{{Name: "w", Data: ps, Grad: make([]float32, 1)}}, lr)
			if err != nil {
				t.Fatal(err)
			}
			const spe = 5
			sched, err := newSchedule(opt, s, spe)
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

// WithEMA (-model-ema): the average follows ema = d·ema + (1-d)·w over parameters and float buffers,
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
	if _, err := New(WithEMA(1)); err == nil {
		t.Fatal("WithEMA(1) accepted")
	}
}

type noState struct{}

func (noState) StateDict() []nn.StateEntry          { return nil }
func (noState) LoadStateDict([]nn.StateEntry) error { return nil }

// Schedules onecycle, poly and constant (-sched): the learning rate at the first step, its peak and at
// the last step of 10 epochs of 5 steps, as PyTorch's OneCycleLR (from -lr/25 up to -lr
// after 30% of the steps, down to -lr/25/1e4), PolynomialLR (power 2 after a 2-epoch
// warmup: 0 at the end) and ConstantLR (-lr held after the warmup) give them. OneCycleLR's
// final rate is that of the last step taken (step 49; PyTorch's step 50 would lie past it).
func TestSchedulesOfPyTorchUsers(t *testing.T) {
	for _, tc := range []struct {
		name              string
		sched             Schedule
		first, peak, last float64
		peakAt, lastAt    int
	}{
		{"onecycle", Schedule{Name: "onecycle"}, 0.1 / 25, 0.1, 0.1 / 25 / 1e4, 14, 49},
		{"poly", Schedule{Name: "poly", PolyPower: 2, WarmupEpochs: 2}, 0.001, 0.1, 0, 10, 50},
		{"constant", Schedule{Name: "constant", WarmupEpochs: 2}, 0.001, 0.1, 0.1, 10, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const lr = 0.1
			opt, err := optim.NewSGD([]optim.Segment{{Name: "w", Data: []float32{0}, Grad: make([]float32, 1)}}, lr, optim.WithMomentum(0.9))
			if err != nil {
				t.Fatal(err)
			}
			const spe = 5
			sched, err := newSchedule(opt, settingsOf(t, WithOptimizer(SGD(lr, 0.9)), WithSchedule(tc.sched), WithEpochs(10)), spe)
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
}

// settingsOf is the settings of a Trainer of opts.
func settingsOf(t *testing.T, opts ...Option) *settings {
	t.Helper()
	tr, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &tr.s
}
