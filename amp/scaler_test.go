package amp

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

type scalerFixture struct {
	Torch string `json:"torch"`
	Cases []struct {
		InitScale      float64 `json:"init_scale"`
		GrowthFactor   float64 `json:"growth_factor"`
		BackoffFactor  float64 `json:"backoff_factor"`
		GrowthInterval int     `json:"growth_interval"`
		Steps          []struct {
			Scale         uint32   `json:"scale"`
			Grads         []uint32 `json:"grads"`
			Skipped       bool     `json:"skipped"`
			Unscaled      []uint32 `json:"unscaled"`
			NextScale     uint32   `json:"next_scale"`
			GrowthTracker int64    `json:"growth_tracker"`
		} `json:"steps"`
	} `json:"cases"`
}

// countingOpt records optimizer steps.
type countingOpt struct {
	optim.Optimizer
	steps int
}

func (o *countingOpt) Step() error { o.steps++; return nil }

// The scale sequence, skips, growth tracker and unscaled gradients equal a step-by-step replay
// of torch's GradScaler (testdata/make_fixtures.py explains why it is a replay), bit for bit.
func TestScalerMatchesTorchReplay(t *testing.T) {
	var fx scalerFixture
	loadJSON(t, "testdata/scaler.json", &fx)
	for ci, c := range fx.Cases {
		s, err := NewGradScaler(WithInitScale(c.InitScale), WithGrowthFactor(c.GrowthFactor),
			WithBackoffFactor(c.BackoffFactor), WithGrowthInterval(c.GrowthInterval))
		if err != nil {
			t.Fatal(err)
		}
		opt := &countingOpt{}
		wantSteps := 0
		for i, st := range c.Steps {
			if got := math.Float32bits(s.Scale()); got != st.Scale {
				t.Fatalf("case %d step %d: scale %g, torch %g", ci, i, s.Scale(), math.Float32frombits(st.Scale))
			}
			grads := make([]float32, len(st.Grads))
			for j, b := range st.Grads {
				grads[j] = math.Float32frombits(b)
			}
			if inf := s.Unscale(grads); inf != st.Skipped {
				t.Fatalf("case %d step %d: found inf %v, torch %v", ci, i, inf, st.Skipped)
			}
			for j, b := range st.Unscaled {
				if w := math.Float32frombits(b); math.Float32bits(grads[j]) != b && !(w != w && grads[j] != grads[j]) {
					t.Fatalf("case %d step %d: unscaled grad %d = %g, torch %g", ci, i, j, grads[j], w)
				}
			}
			skipped, err := s.Step(opt)
			if err != nil || skipped != st.Skipped {
				t.Fatalf("case %d step %d: skipped %v (%v), torch %v", ci, i, skipped, err, st.Skipped)
			}
			if !skipped {
				wantSteps++
			}
			if err := s.Update(); err != nil {
				t.Fatal(err)
			}
			if got := math.Float32bits(s.Scale()); got != st.NextScale || s.GrowthTracker() != st.GrowthTracker {
				t.Fatalf("case %d step %d: next scale %g tracker %d, torch %g %d", ci, i, s.Scale(), s.GrowthTracker(),
					math.Float32frombits(st.NextScale), st.GrowthTracker)
			}
		}
		if opt.steps != wantSteps {
			t.Fatalf("case %d: optimizer stepped %d times, want %d", ci, opt.steps, wantSteps)
		}
	}
}

func TestScalerOptionsAndErrors(t *testing.T) {
	s, err := NewGradScaler()
	if err != nil {
		t.Fatal(err)
	}
	if s.Scale() != 65536 || s.cfg.growth != 2 || s.cfg.backoff != 0.5 || s.cfg.interval != 2000 {
		t.Fatalf("defaults differ from PyTorch's: %+v scale %g", s.cfg, s.Scale())
	}
	for name, opt := range map[string]Option{
		"zero scale": WithInitScale(0),
		"inf scale":  WithInitScale(math.Inf(1)),
		"growth 1":   WithGrowthFactor(1),
		"backoff 1":  WithBackoffFactor(1),
		"backoff 0":  WithBackoffFactor(0),
		"interval 0": WithGrowthInterval(0),
		"NaN growth": WithGrowthFactor(math.NaN()),
		"huge scale": WithInitScale(1e39),
	} {
		if _, err := NewGradScaler(opt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := NewShardedScaler(nil); err == nil {
		t.Error("nil group: no error")
	}
	opt := &countingOpt{}
	if _, err := s.Step(opt); !errors.Is(err, ErrNoInfCheck) {
		t.Errorf("Step without Unscale: %v, want ErrNoInfCheck", err)
	}
	if err := s.Update(); !errors.Is(err, ErrNoInfCheck) {
		t.Errorf("Update without Unscale: %v, want ErrNoInfCheck", err)
	}
	// WithGradBuffer: Step unscales by itself.
	grads := []float32{65536, -131072}
	s, _ = NewGradScaler(WithGradBuffer(grads))
	if skipped, err := s.Step(opt); err != nil || skipped || grads[0] != 1 || grads[1] != -2 {
		t.Fatalf("Step with a grad buffer: skipped %v err %v grads %v", skipped, err, grads)
	}
	if _, err := s.Step(opt); err == nil {
		t.Error("second Step before Update: no error")
	}
	// Disabled: scale 1, no skipping, no state change.
	d, _ := NewGradScaler(WithEnabled(false))
	if d.Scale() != 1 || d.Enabled() {
		t.Fatalf("disabled scale %g", d.Scale())
	}
	before := opt.steps
	d.Unscale([]float32{float32(math.Inf(1))})
	if skipped, err := d.Step(opt); err != nil || skipped || opt.steps != before+1 {
		t.Fatalf("disabled Step: %v %v", skipped, err)
	}
	if err := d.Update(); err != nil || d.Scale() != 1 {
		t.Fatalf("disabled Update: %v scale %g", err, d.Scale())
	}
}

// Unscale flags +inf, -inf and NaN anywhere in the buffer, and only those.
func TestUnscaleFlags(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	tests := []struct {
		name  string
		grads []float32
		want  bool
	}{
		{"clean", []float32{1, -2, 3e38, 0}, false},
		{"empty", nil, false},
		{"+inf first", []float32{inf, 1, 2}, true},
		{"-inf last", []float32{1, 2, -inf}, true},
		{"NaN middle", []float32{1, nan, 2}, true},
		{"max float", []float32{math.MaxFloat32, -math.MaxFloat32}, false},
	}
	for _, tc := range tests {
		for _, scale := range []float64{1, 65536} {
			s, _ := NewGradScaler(WithInitScale(scale))
			g := append([]float32(nil), tc.grads...)
			if got := s.Unscale(g); got != tc.want {
				t.Errorf("%s scale %g: found inf %v, want %v", tc.name, scale, got, tc.want)
			}
		}
	}
}

// State survives a save/load, and clipping after unscale clips the true gradients.
func TestScalerStateAndClipping(t *testing.T) {
	s, _ := NewGradScaler(WithInitScale(1024), WithGrowthInterval(3), WithBackoffFactor(0.25))
	opt := &countingOpt{}
	for _, g := range [][]float32{{1}, {2}, {float32(math.Inf(1))}, {3}} {
		s.Unscale(g)
		if _, err := s.Step(opt); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := NewGradScaler()
	if err := r.LoadStateDict(append(s.StateDict(), nn.StateEntry{Name: "fc.weight", F32: []float32{1}})); err != nil {
		t.Fatal(err)
	}
	if r.Scale() != s.Scale() || r.GrowthTracker() != s.GrowthTracker() || r.cfg.interval != 3 || r.cfg.backoff != 0.25 {
		t.Fatalf("loaded scale %g tracker %d cfg %+v, saved %g %d", r.Scale(), r.GrowthTracker(), r.cfg, s.Scale(), s.GrowthTracker())
	}
	if err := r.LoadStateDict(s.StateDict()[:2]); err == nil {
		t.Error("incomplete state: no error")
	}

	ps, err := nn.NewParamSet(nil, []*nn.Param{{Name: "w", Shape: []int{2}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	segs, _ := optim.Segments(ps, 0)
	sgd, _ := optim.NewSGD(segs, 1)
	sc, _ := NewGradScaler()
	copy(ps.Grad, []float32{3 * 65536, 4 * 65536}) // true gradient (3, 4), norm 5
	sc.Unscale(ps.Grad)
	norm, err := optim.ClipGradNorm(segs, 1)
	if err != nil || math.Abs(norm-5) > 1e-6 {
		t.Fatalf("norm after unscale %g (%v), want 5", norm, err)
	}
	if skipped, err := sc.Step(sgd); err != nil || skipped {
		t.Fatal(skipped, err)
	}
	if w := ps.Param("w").Data; math.Abs(float64(w[0])+0.6) > 1e-6 || math.Abs(float64(w[1])+0.8) > 1e-6 {
		t.Fatalf("weights after clipped step %v, want [-0.6 -0.8]", w)
	}
}

// An inf on one rank makes every rank skip the same step and keep the same scale.
func TestShardedScalerSkipsTogether(t *testing.T) {
	ctx := context.Background()
	const ranks, steps = 2, 6
	infAt := map[int]int{2: 1, 4: 0} // step -> rank whose shard overflows
	groups := comm.NewLocalGroups(ranks)
	type record struct {
		skipped []bool
		scales  []float32
	}
	recs := make([]record, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close(ctx)
			s, err := NewShardedScaler(g, WithGrowthInterval(2))
			if err != nil {
				errs[g.Rank()] = err
				return
			}
			opt := &countingOpt{}
			for step := 0; step < steps; step++ {
				shard := []float32{1, 2, 3}
				if r, ok := infAt[step]; ok && r == g.Rank() {
					shard[1] = float32(math.Inf(1))
				}
				s.Unscale(shard)
				skipped, err := s.StepContext(ctx, opt)
				if err != nil {
					errs[g.Rank()] = err
					return
				}
				if err := s.UpdateContext(ctx); err != nil {
					errs[g.Rank()] = err
					return
				}
				recs[g.Rank()].skipped = append(recs[g.Rank()].skipped, skipped)
				recs[g.Rank()].scales = append(recs[g.Rank()].scales, s.Scale())
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for step := 0; step < steps; step++ {
		_, want := infAt[step]
		for r := range ranks {
			if recs[r].skipped[step] != want || recs[r].scales[step] != recs[0].scales[step] {
				t.Fatalf("step %d rank %d: skipped %v scale %g; want skipped %v, scale of rank 0 %g",
					step, r, recs[r].skipped[step], recs[r].scales[step], want, recs[0].scales[step])
			}
		}
	}
	if want := []float32{65536, 131072, 65536, 65536, 32768, 32768}; !equal32(recs[0].scales, want) {
		t.Fatalf("scales %v, want %v", recs[0].scales, want)
	}
}

func equal32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Unscaled gives the scaler the verdict of an unscale done elsewhere: a clean answer lets the
// step run and counts toward growth, an inf skips the step and backs the scale off, answers
// of one step combine, and without any answer Step refuses as it does before Unscale.
func TestUnscaledElsewhere(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		answers   []bool
		wantSteps int
		wantScale float32
	}{
		{"clean", []bool{false}, 1, 1024},
		{"inf", []bool{true}, 0, 512},
		{"clean then inf", []bool{false, true}, 0, 512},
		{"inf then clean", []bool{true, false}, 0, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewGradScaler(WithInitScale(1024), WithGrowthInterval(100))
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tc.answers {
				s.Unscaled(a)
			}
			opt := &countingOpt{}
			skipped, err := s.StepContext(ctx, opt)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.UpdateContext(ctx); err != nil {
				t.Fatal(err)
			}
			if opt.steps != tc.wantSteps || skipped != (tc.wantSteps == 0) || s.Scale() != tc.wantScale {
				t.Errorf("steps %d, skipped %v, scale %v; want %d steps, scale %v", opt.steps, skipped, s.Scale(), tc.wantSteps, tc.wantScale)
			}
		})
	}
	s, err := NewGradScaler()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StepContext(ctx, &countingOpt{}); err == nil {
		t.Error("Step without Unscale or Unscaled: no error")
	}
}
