package optim

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Every constructor refuses a learning rate or weight decay that is negative, NaN or Inf,
// as torch.optim does, with ErrBadHyperparameter and a message naming the value; 0 is a
// valid learning rate and weight decay.
func TestConstructorsRefuseBadLRAndWeightDecay(t *testing.T) {
	ctors := map[string]func([]Segment, float64) (Optimizer, error){
		"SGD":   func(s []Segment, lr float64) (Optimizer, error) { return NewSGD(s, lr, WithMomentum(0.9)) },
		"Adam":  func(s []Segment, lr float64) (Optimizer, error) { return NewAdam(s, lr) },
		"AdamW": func(s []Segment, lr float64) (Optimizer, error) { return NewAdamW(s, lr) },
	}
	for _, tc := range []struct {
		name   string
		lr, wd float64
		want   string // "" accepts
	}{
		{"zero lr and decay", 0, 0, ""},
		{"plain", 0.1, 1e-4, ""},
		{"negative lr", -1, 0, "learning rate -1"},
		{"NaN lr", math.NaN(), 0, "learning rate NaN"},
		{"Inf lr", math.Inf(1), 0, "learning rate +Inf"},
		{"negative decay", 0.1, -1e-4, "weight decay -0.0001"},
		{"NaN decay", 0.1, math.NaN(), "weight decay NaN"},
		{"Inf decay", 0.1, math.Inf(1), "weight decay +Inf"},
	} {
		for name, ctor := range ctors {
			segs := []Segment{{Name: "w", Data: make([]float32, 4), Grad: make([]float32, 4), WeightDecay: tc.wd}}
			_, err := ctor(segs, tc.lr)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s %s: %v", name, tc.name, err)
			case tc.want != "" && (!errors.Is(err, ErrBadHyperparameter) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s %s: err = %v, want ErrBadHyperparameter naming %q", name, tc.name, err, tc.want)
			}
		}
	}
}
