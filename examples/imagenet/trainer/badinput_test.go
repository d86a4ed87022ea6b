package trainer

import (
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/models"
)

// A learning rate or weight decay that is negative, NaN or Inf is refused, naming the flag,
// as PyTorch's optimizers refuse it (a negative -lr trained with the recipe's before); an
// unknown -arch names every architecture there is.
func TestBadHyperparameterFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // each in the error
	}{
		{[]string{"-lr", "-1"}, []string{"-lr", "want a finite number >= 0"}},
		{[]string{"-learning-rate", "-0.1"}, []string{"-learning-rate", ">= 0"}},
		{[]string{"-lr", "NaN"}, []string{"-lr", ">= 0"}},
		{[]string{"-lr", "Inf"}, []string{"-lr", ">= 0"}},
		{[]string{"-wd", "-1"}, []string{"-wd", ">= 0"}},
		{[]string{"-weight-decay", "-1e-4"}, []string{"-weight-decay", ">= 0"}},
		{[]string{"-wd", "inf"}, []string{"-wd", ">= 0"}},
		{[]string{"-arch", "resnet19"}, append([]string{"-arch", `"resnet19"`}, models.Archs()...)},
		{[]string{"-arch", "vgg16"}, append([]string{"-arch", "swin_t", "resnet20", "swin_test"}, models.Archs()...)},
	} {
		_, err := parseConfig(t, tc.args...)
		if err == nil {
			t.Errorf("%v: accepted", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v: does not say %q", tc.args, err, w)
			}
		}
	}
	// 0 is a weight decay (none) and, for -lr, the recipe's.
	c, err := parseConfig(t, "-lr", "0", "-wd", "0", "-b", "256")
	if err != nil {
		t.Fatal(err)
	}
	if c.LR != 0.1 || c.WeightDecay != 0 {
		t.Errorf("-lr 0 -wd 0: lr %g wd %g, want the recipe's 0.1 and 0", c.LR, c.WeightDecay)
	}
	// Without the flags, the recipe's.
	if c, err = parseConfig(t, "-b", "256"); err != nil || c.WeightDecay != 1e-4 {
		t.Errorf("no -wd: wd %g (%v), want the recipe's 1e-4", c.WeightDecay, err)
	}
}
