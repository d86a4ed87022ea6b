package optim

import (
	"fmt"
	"math"
	"testing"
)

// Schedules are float64 arithmetic on both sides in the same order; Go's math.Cos and
// math.Pow may differ from libm by an ulp, so the tolerance is rel 1e-12.
const schedRel = 1e-12

func buildSched(opt LRTarget, c schedCase) (Scheduler, error) {
	switch c.Kind {
	case "step":
		return NewStepLR(opt, c.StepSize, c.Gamma)
	case "multistep":
		return NewMultiStepLR(opt, c.Milestones, c.Gamma)
	case "cosine":
		return NewCosineAnnealingLR(opt, c.TMax, c.EtaMin)
	case "linear":
		return NewLinearLR(opt, c.Start, c.End, c.Total)
	case "constant":
		return NewConstantLR(opt, c.Factor, c.Total)
	case "poly":
		return NewPolynomialLR(opt, c.Total, c.Power)
	case "onecycle":
		return NewOneCycleLR(opt, c.MaxLR, c.TotalSteps, OneCycle{
			PctStart: c.PctStart, Linear: c.Anneal == "linear", ThreePhase: c.ThreePhase,
			NoCycleMomentum: c.CycleMomentum != nil && !*c.CycleMomentum,
			BaseMomentum:    c.BaseMomentum, MaxMomentum: c.MaxMomentum,
			DivFactor: c.DivFactor, FinalDivFactor: c.FinalDivFactor,
		})
	}
	var subs []Scheduler
	for _, sc := range c.Scheds {
		s, err := buildSched(opt, sc)
		if err != nil {
			return nil, err
		}
		subs = append(subs, s)
	}
	switch c.Kind {
	case "sequential":
		return NewSequentialLR(opt, subs, c.Milestones)
	case "chained":
		return NewChainedScheduler(opt, subs...)
	}
	return nil, fmt.Errorf("unknown scheduler kind %q", c.Kind)
}

func TestSchedulesMatchPyTorch(t *testing.T) {
	f := loadFixtures(t)
	for _, c := range f.cases.Sched {
		t.Run(c.Name, func(t *testing.T) {
			f := f.with(t)
			want := f.f64("sched." + c.Name)
			var wantMom []float64
			if f.has("sched." + c.Name + ".momentum") {
				wantMom = f.f64("sched." + c.Name + ".momentum")
			}
			newOpt := func(segs []Segment) (Optimizer, error) {
				switch c.Opt {
				case "sgd":
					return NewSGD(segs, 0.1, WithMomentum(0.9))
				case "adam":
					return NewAdam(segs, 0.1)
				}
				return NewSGD(segs, 0.1)
			}
			opt, err := newOpt([]Segment{{Name: "x", Data: make([]float32, 1), Grad: make([]float32, 1)}})
			if err != nil {
				t.Fatal(err)
			}
			s, err := buildSched(opt, c)
			if err != nil {
				t.Fatal(err)
			}
			for k := range want {
				if k > 0 {
					s.Step()
				}
				if got := opt.LR(); math.Abs(got-want[k]) > schedRel*math.Abs(want[k]) {
					t.Fatalf("lr after %d steps = %.17g, want %.17g", k, got, want[k])
				}
				if got := s.LR(); got != opt.LR() {
					t.Fatalf("after %d steps: scheduler LR %g, optimizer LR %g", k, got, opt.LR())
				}
				if wantMom != nil {
					if got := opt.(MomentumTarget).Momentum(); math.Abs(got-wantMom[k]) > schedRel*math.Abs(wantMom[k]) {
						t.Fatalf("momentum after %d steps = %.17g, want %.17g", k, got, wantMom[k])
					}
				}
				// Resume half-way from state dicts into freshly built objects.
				if k == len(want)/2 {
					st, ost := s.StateDict(), opt.StateDict()
					opt2, _ := newOpt(opt.(interface{ Segments() []Segment }).Segments())
					s2, err := buildSched(opt2, c)
					if err != nil {
						t.Fatal(err)
					}
					if err := opt2.LoadStateDict(ost); err != nil {
						t.Fatal(err)
					}
					if err := s2.LoadStateDict(st); err != nil {
						t.Fatal(err)
					}
					opt, s = opt2, s2
				}
			}
		})
	}
}

func TestSchedulerErrors(t *testing.T) {
	opt, _ := NewSGD(nil, 0.1)
	for _, tc := range []struct {
		name string
		make func() error
	}{
		{"step size 0", func() error { _, err := NewStepLR(opt, 0, 0.1); return err }},
		{"cosine T_max 0", func() error { _, err := NewCosineAnnealingLR(opt, 0, 0); return err }},
		{"linear start 0", func() error { _, err := NewLinearLR(opt, 0, 1, 5); return err }},
		{"constant factor 2", func() error { _, err := NewConstantLR(opt, 2, 5); return err }},
		{"poly total 0", func() error { _, err := NewPolynomialLR(opt, 0, 1); return err }},
		{"onecycle total 0", func() error { _, err := NewOneCycleLR(opt, 0.1, 0, OneCycle{}); return err }},
		{"onecycle pct 1", func() error { _, err := NewOneCycleLR(opt, 0.1, 10, OneCycle{PctStart: 1}); return err }},
		{"onecycle momentum of SGD without momentum", func() error { _, err := NewOneCycleLR(opt, 0.1, 10, OneCycle{}); return err }},
		{"sequential milestones", func() error {
			a, _ := NewStepLR(opt, 1, 0.5)
			_, err := NewSequentialLR(opt, []Scheduler{a}, []int{3})
			return err
		}},
	} {
		if err := tc.make(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestClipGradNormMatchesPyTorch(t *testing.T) {
	f := loadFixtures(t)
	for _, c := range f.cases.Clip {
		name := c["name"].(string)
		t.Run(name, func(t *testing.T) {
			f := f.with(t)
			ps := f.paramSet()
			f.setGrads(ps, 3)
			segs, err := Segments(ps, 0)
			if err != nil {
				t.Fatal(err)
			}
			norm, err := ClipGradNorm(segs, c["max_norm"].(float64))
			if err != nil {
				t.Fatal(err)
			}
			// PyTorch's norm is float32, reduced in its own order; ours is accumulated in float64
			// then rounded: they agree to a few float32 ulps. Clipped gradients likewise.
			want := f.f64("clip." + name + ".norm")[0]
			if math.Abs(norm-want) > 1e-6*want {
				t.Errorf("norm %.9g, want %.9g", norm, want)
			}
			for i, p := range ps.Params {
				closeTo(t, fmt.Sprintf("clip.%s.p%d", name, i), p.Grad, f.f32(fmt.Sprintf("clip.%s.p%d", name, i)), 2e-6, 1e-9)
			}
		})
	}
}

func TestClipGradNormNonFinite(t *testing.T) {
	g := []float32{1, float32(math.Inf(1))}
	_, err := ClipGradNorm([]Segment{{Name: "x", Data: make([]float32, 2), Grad: g}}, 1)
	if err == nil {
		t.Fatal("infinite norm: no error")
	}
}
