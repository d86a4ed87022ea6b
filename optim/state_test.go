package optim

import (
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
)

// TestResumeAtAnotherWorldSize runs 5 steps uninterrupted, and 2 steps on 3 ZeRO shards then
// 3 steps resumed on 2 shards (and on the whole buffer) from the shards' state dicts. The
// results must be bit-identical: resharding only moves state.
func TestResumeAtAnotherWorldSize(t *testing.T) {
	f := loadFixtures(t)
	for _, c := range f.cases.Optim {
		if c.Momentum == 0 && c.Kind == "sgd" {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			f := f.with(t)
			ref := f.paramSet()
			refOpts, err := shards(1)(ref, c)
			if err != nil {
				t.Fatal(err)
			}
			run := func(ps *nn.ParamSet, opts []Optimizer, from, to int) {
				for k := from; k < to; k++ {
					f.setGrads(ps, k)
					for _, o := range opts {
						if err := o.Step(); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			run(ref, refOpts, 0, 5)
			for _, to := range []int{1, 2} {
				ps := f.paramSet()
				three, err := shards(3)(ps, c)
				if err != nil {
					t.Fatal(err)
				}
				run(ps, three, 0, 2)
				var saved []nn.StateEntry
				for _, o := range three {
					saved = append(saved, o.StateDict()...)
				}
				saved = cloneEntries(saved)
				next, err := shards(to)(ps, c)
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range next {
					if err := o.LoadStateDict(saved); err != nil {
						t.Fatal(err)
					}
				}
				run(ps, next, 2, 5)
				for i := range ps.Data {
					if ps.Data[i] != ref.Data[i] {
						t.Fatalf("3 -> %d shards: element %d = %v, uninterrupted %v", to, i, ps.Data[i], ref.Data[i])
					}
				}
			}
		})
	}
}

func cloneEntries(es []nn.StateEntry) []nn.StateEntry {
	out := make([]nn.StateEntry, len(es))
	for i, e := range es {
		e.F32 = append([]float32(nil), e.F32...)
		out[i] = e
	}
	return out
}

func TestLoadStateDictErrors(t *testing.T) {
	f := loadFixtures(t)
	c := optCase{Kind: "adamw", LR: 1e-3}
	build := func(n int) []Optimizer {
		opts, err := shards(n)(f.paramSet(), c)
		if err != nil {
			t.Fatal(err)
		}
		return opts
	}
	src := build(1)[0]
	f.setGrads(f.paramSet(), 0)
	if err := src.Step(); err != nil {
		t.Fatal(err)
	}
	full := src.StateDict()
	drop := func(name string) []nn.StateEntry {
		var out []nn.StateEntry
		for _, e := range full {
			if e.Name != name {
				out = append(out, e)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		entries []nn.StateEntry
		want    string
	}{
		{"no step", drop(KeyStep), KeyStep},
		{"missing moment", drop("optim.p0.exp_avg_sq"), "optim.p0.exp_avg_sq"},
		{"short moment", append(drop("optim.p1.exp_avg"), nn.StateEntry{Name: "optim.p1.exp_avg", F32: make([]float32, 2)}), "optim.p1.exp_avg"},
		{"gap in slices", append(drop("optim.p0.exp_avg"), nn.StateEntry{Name: "optim.p0.exp_avg[0:5]", F32: make([]float32, 5)}), "optim.p0.exp_avg"},
	} {
		err := build(1)[0].LoadStateDict(tc.entries)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
}

// TestSGDMomentumStartsFresh checks PyTorch's rule: a momentum buffer absent from the state
// dict is initialised from the next gradient.
func TestSGDMomentumStartsFresh(t *testing.T) {
	mk := func() *SGD {
		o, err := NewSGD([]Segment{{Name: "w", Data: []float32{1}, Grad: []float32{2}}}, 0.5, WithMomentum(0.9), WithDampening(0.5))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	o := mk()
	if err := o.LoadStateDict([]nn.StateEntry{{Name: KeyStep, I64: []int64{7}}}); err != nil {
		t.Fatal(err)
	}
	_ = o.Step()
	if got := o.segs[0].Data[0]; got != 0 { // buf = g = 2 (no dampening on the first step)
		t.Fatalf("after one step from an empty buffer: %v, want 0", got)
	}
	if got := o.Steps(); got != 8 {
		t.Fatalf("steps %d, want 8", got)
	}
}
