package optim

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
)

// Tolerance for optimizer trajectories against PyTorch: |got-want| <= 1e-6*|want| + 1e-7. Both
// sides compute in float32 with the same operation order, but PyTorch's vectorised CPU kernels
// use fused multiply-adds (one rounding) where Go rounds twice, so elements differ by a few
// ulps (float32's ulp is 1.2e-7 relative); over 5 steps that stays under 1e-6 (measured: at
// most 9e-7). The absolute term covers elements that land near zero by cancellation: they keep
// the absolute error of their operands, which are of order 1 (1 ulp of 1 is 1.2e-7).
const trajRel, trajAbs = 1e-6, 1e-7

func newOpt(c optCase, segs []Segment, extra ...Option) (Optimizer, error) {
	opts := slices.Clone(extra)
	if c.Momentum != 0 {
		opts = append(opts, WithMomentum(c.Momentum))
	}
	if c.Dampening != 0 {
		opts = append(opts, WithDampening(c.Dampening))
	}
	if c.Nesterov {
		opts = append(opts, WithNesterov())
	}
	if c.Maximize {
		opts = append(opts, WithMaximize())
	}
	if c.Betas != nil {
		opts = append(opts, WithBetas(c.Betas[0], c.Betas[1]))
	}
	if c.Eps != 0 {
		opts = append(opts, WithEps(c.Eps))
	}
	if c.AMSGrad {
		opts = append(opts, WithAMSGrad())
	}
	switch c.Kind {
	case "sgd":
		return NewSGD(segs, c.LR, opts...)
	case "adam":
		return NewAdam(segs, c.LR, opts...)
	case "adamw":
		return NewAdamW(segs, c.LR, opts...)
	}
	return nil, fmt.Errorf("unknown kind %q", c.Kind)
}

// segmentation builds one or more optimizers over ps in one of the ways DDP and ZeRO do.
type segmentation struct {
	name  string
	build func(ps *nn.ParamSet, c optCase) ([]Optimizer, error)
}

func decayOf(c optCase) SegmentOption {
	return WithDecayFunc(func(p *nn.Param) float64 {
		if p.Name == "p0" {
			return c.Decay
		}
		return 0
	})
}

func single(extra []SegmentOption, opts ...Option) func(ps *nn.ParamSet, c optCase) ([]Optimizer, error) {
	return func(ps *nn.ParamSet, c optCase) ([]Optimizer, error) {
		segs, err := Segments(ps, 0, append([]SegmentOption{decayOf(c)}, extra...)...)
		if err != nil {
			return nil, err
		}
		o, err := newOpt(c, segs, opts...)
		return []Optimizer{o}, err
	}
}

// shards splits the flat buffer into n ranges that cut through parameters, one optimizer each.
func shards(n int) func(ps *nn.ParamSet, c optCase) ([]Optimizer, error) {
	return func(ps *nn.ParamSet, c optCase) ([]Optimizer, error) {
		var out []Optimizer
		total := ps.NumParams()
		for r := range n {
			segs, err := Segments(ps, 0, decayOf(c), Merged(), InRange(r*total/n, (r+1)*total/n))
			if err != nil {
				return nil, err
			}
			o, err := newOpt(c, segs)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
		}
		return out, nil
	}
}

var segmentations = []segmentation{
	{"per-param", single(nil)},
	{"merged", single([]SegmentOption{Merged()})},
	{"zero-3-shards", shards(3)},
	{"zero-4-shards", shards(4)},
	{"workers", single([]SegmentOption{Merged()}, WithWorkers(4, 1))},
}

func TestOptimizersMatchPyTorch(t *testing.T) {
	f := loadFixtures(t)
	for _, c := range f.cases.Optim {
		for _, sg := range segmentations {
			t.Run(c.Name+"/"+sg.name, func(t *testing.T) {
				f := f.with(t)
				ps := f.paramSet()
				opts, err := sg.build(ps, c)
				if err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for k := range f.cases.Steps {
					f.setGrads(ps, k)
					for _, o := range opts {
						if err := o.Step(); err != nil {
							t.Fatal(err)
						}
					}
					for i, p := range ps.Params {
						key := fmt.Sprintf("opt.%s.s%d.p%d", c.Name, k, i)
						worst = max(worst, closeTo(t, key, p.Data, f.f32(key), trajRel, trajAbs))
					}
				}
				// The state, gathered from every optimizer (shards included), matches PyTorch's.
				var all []nn.StateEntry
				for _, o := range opts {
					all = append(all, o.StateDict()...)
				}
				shapes := map[string][]int{"p0": ps.Params[0].Shape, "p1": ps.Params[1].Shape}
				merged, err := Consolidate(all, shapes)
				if err != nil {
					t.Fatal(err)
				}
				got := indexByName(merged)
				for i := range ps.Params {
					for _, kind := range []string{kindMomentum, kindExpAvg, kindExpAvgSq, kindMaxExpAvgSq} {
						key := fmt.Sprintf("opt.%s.state.p%d.%s", c.Name, i, kind)
						e, ok := got[fmt.Sprintf("optim.p%d.%s", i, kind)]
						if !f.has(key) {
							if ok {
								t.Errorf("state %s: PyTorch has none", e.Name)
							}
							continue
						}
						if !ok {
							t.Fatalf("state for %s missing; have %d entries", key, len(merged))
						}
						worst = max(worst, closeTo(t, key, e.F32, f.f32(key), trajRel, trajAbs))
					}
				}
				t.Logf("largest relative difference from PyTorch: %.2g", worst)
			})
		}
	}
}

// TestWorkersBitIdentical checks the multi-goroutine path against the serial one on a
// segment long enough to be split.
func TestWorkersBitIdentical(t *testing.T) {
	for _, kind := range []string{"sgd", "adam", "adamw"} {
		c := optCase{Kind: kind, LR: 1e-2, Momentum: 0.9, Decay: 0.1, AMSGrad: true}
		run := func(opts ...Option) []float32 {
			n := 100003
			data, grad := make([]float32, n), make([]float32, n)
			for i := range data {
				data[i] = float32(i%97)/97 - 0.5
			}
			seg := []Segment{{Name: "big", Data: data, Grad: grad, WeightDecay: c.Decay}}
			o, err := newOpt(c, seg, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for s := range 4 {
				for i := range grad {
					grad[i] = float32((i*7+s*13)%101)/50 - 1
				}
				if err := o.Step(); err != nil {
					t.Fatal(err)
				}
			}
			return data
		}
		serial, par := run(), run(WithWorkers(7, 1000))
		for i := range serial {
			if serial[i] != par[i] {
				t.Fatalf("%s: element %d: serial %v, 7 workers %v", kind, i, serial[i], par[i])
			}
		}
	}
}
