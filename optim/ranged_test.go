package optim

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
)

// TestRangedStepBitIdentical applies each step in pieces (as DDP does bucket by bucket),
// cut at random points that fall inside parameters and segments, in a random order, and
// checks the parameters against whole Steps bit for bit, for every optimizer and variant
// (including the first SGD step, which initialises the momentum buffers).
func TestRangedStepBitIdentical(t *testing.T) {
	cases := []optCase{
		{Kind: "sgd", LR: 0.1},
		{Kind: "sgd", LR: 0.1, Momentum: 0.9},
		{Kind: "sgd", LR: 0.1, Momentum: 0.9, Decay: 0.01, Dampening: 0.1},
		{Kind: "sgd", LR: 0.1, Momentum: 0.9, Nesterov: true, Maximize: true},
		{Kind: "adam", LR: 1e-2, Decay: 0.1},
		{Kind: "adamw", LR: 1e-2, Decay: 0.1, AMSGrad: true},
	}
	shapes := [][]int{{7, 3}, {5}, {4, 4, 2}, {9}}
	for _, c := range cases {
		for _, merged := range []bool{false, true} {
			run := func(ranged bool) []float32 {
				var params []*nn.Param
				for i, s := range shapes {
					params = append(params, &nn.Param{Name: pname(i), Shape: s, NoWeightDecay: i == 1})
				}
				ps, err := nn.NewParamSet(nil, params, nil)
				if err != nil {
					t.Fatal(err)
				}
				for i := range ps.Data {
					ps.Data[i] = float32(i%13)/13 - 0.4
				}
				var sopts []SegmentOption
				if merged {
					sopts = append(sopts, Merged())
				}
				// The last parameter is not the optimizer's: its range must be left alone.
				segs, err := Segments(ps, c.Decay, sopts...)
				if err != nil {
					t.Fatal(err)
				}
				segs = segs[:len(segs)-1]
				o, err := newOpt(c, segs)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewSource(1))
				for s := range 4 {
					for i := range ps.Grad {
						ps.Grad[i] = float32((i*7+s*13)%23)/11 - 1
					}
					if !ranged {
						if err := o.Step(); err != nil {
							t.Fatal(err)
						}
						continue
					}
					r := o.(Ranged)
					if err := r.BeginStep(); err != nil {
						t.Fatal(err)
					}
					cuts := []int{0, rng.Intn(len(ps.Grad)), rng.Intn(len(ps.Grad)), len(ps.Grad)}
					if cuts[1] > cuts[2] {
						cuts[1], cuts[2] = cuts[2], cuts[1]
					}
					for _, k := range rng.Perm(3) {
						if err := r.StepGrads(ps.Grad[cuts[k]:cuts[k+1]]); err != nil {
							t.Fatal(err)
						}
					}
					if err := r.EndStep(); err != nil {
						t.Fatal(err)
					}
				}
				return ps.Data
			}
			whole, pieces := run(false), run(true)
			for i := range whole {
				if whole[i] != pieces[i] {
					t.Fatalf("%+v merged=%v: element %d: Step %v, pieces %v", c, merged, i, whole[i], pieces[i])
				}
			}
		}
	}
}

func TestRangedStepOrder(t *testing.T) {
	data, grad := make([]float32, 4), make([]float32, 4)
	o, err := NewSGD([]Segment{{Name: "w", Data: data, Grad: grad}}, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.StepGrads(grad); !errors.Is(err, ErrStepState) {
		t.Fatalf("StepGrads before BeginStep: %v", err)
	}
	if err := o.BeginStep(); err != nil {
		t.Fatal(err)
	}
	if err := o.Step(); !errors.Is(err, ErrStepState) {
		t.Fatalf("Step inside a ranged step: %v", err)
	}
	if err := o.EndStep(); err != nil {
		t.Fatal(err)
	}
	if err := o.EndStep(); !errors.Is(err, ErrStepState) {
		t.Fatalf("second EndStep: %v", err)
	}
	if o.Steps() != 1 {
		t.Fatalf("steps = %d, want 1", o.Steps())
	}
}
