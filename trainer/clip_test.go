package trainer

import (
	"context"
	"math"
	"strings"
	"testing"
)

// The trainer clips with optim's clipping: a norm over the maximum is scaled down to it, one
// under it is left alone, and a non-finite norm is an error naming -clip-grad (the float64
// copy it replaced skipped such a step silently).
func TestClipUsesOptim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		grads   []float32
		maxNorm float64
		want    []float32 // nil: an error
	}{
		{"over", []float32{3, 4}, 1, []float32{3 / (5 + 1e-6), 4 / (5 + 1e-6)}},
		{"under", []float32{0.3, 0.4}, 1, []float32{0.3, 0.4}},
		{"NaN", []float32{float32(math.NaN()), 1}, 1, nil},
		{"Inf", []float32{float32(math.Inf(1)), 1}, 1, nil},
	} {
		g := append([]float32(nil), tc.grads...)
		s := &stepper{grads: hostGrads(func() []float32 { return g }), clip: tc.maxNorm}
		err := s.clipGrads(context.Background())
		if tc.want == nil {
			if err == nil || !strings.Contains(err.Error(), "-clip-grad") {
				t.Errorf("%s: err = %v, want an error naming -clip-grad", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		for i := range g {
			if math.Abs(float64(g[i]-tc.want[i])) > 1e-6 {
				t.Errorf("%s: grads %v, want %v", tc.name, g, tc.want)
				break
			}
		}
	}
}
