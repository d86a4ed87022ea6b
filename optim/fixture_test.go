package optim

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"codeberg.org/sbinet/npyio/npz"

	"github.com/gorgonia-parallel/gp/nn"
)

// fixtures are optim/testdata/optim.npz and cases.json, written by
// optim/testdata/make_fixtures.py with PyTorch 1.13.
type fixtures struct {
	t     *testing.T
	r     *npz.Reader
	cases struct {
		Steps      int              `json:"steps"`
		SchedSteps int              `json:"sched_steps"`
		Shapes     [][]int          `json:"shapes"`
		Optim      []optCase        `json:"optim"`
		Sched      []schedCase      `json:"sched"`
		Clip       []map[string]any `json:"clip"`
	}
}

type optCase struct {
	Name, Kind          string
	LR                  float64 `json:"lr"`
	Momentum, Dampening float64
	Nesterov, Maximize  bool
	Decay               float64
	Betas               []float64
	Eps                 float64
	AMSGrad             bool `json:"amsgrad"`
}

type schedCase struct {
	Name, Kind string
	StepSize   int `json:"step_size"`
	Gamma      float64
	Milestones []int
	TMax       int     `json:"t_max"`
	EtaMin     float64 `json:"eta_min"`
	Start, End float64
	Total      int
	Scheds     []schedCase
	// ConstantLR, PolynomialLR and OneCycleLR.
	Factor, Power  float64
	MaxLR          float64 `json:"max_lr"`
	TotalSteps     int     `json:"total_steps"`
	PctStart       float64 `json:"pct_start"`
	Anneal         string
	ThreePhase     bool    `json:"three_phase"`
	DivFactor      float64 `json:"div_factor"`
	FinalDivFactor float64 `json:"final_div_factor"`
	BaseMomentum   float64 `json:"base_momentum"`
	MaxMomentum    float64 `json:"max_momentum"`
	CycleMomentum  *bool   `json:"cycle_momentum"`
	Opt            string  // the optimizer: "sgd" (momentum 0.9), "adam", or plain SGD
}

func loadFixtures(t *testing.T) *fixtures {
	t.Helper()
	f := &fixtures{t: t}
	b, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f.cases); err != nil {
		t.Fatalf("testdata/cases.json: %v", err)
	}
	f.r, err = npz.Open("testdata/optim.npz")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.r.Close() })
	return f
}

func (f *fixtures) f32(key string) []float32 {
	f.t.Helper()
	var v []float32
	if err := f.r.Read(key+".npy", &v); err != nil {
		f.t.Fatalf("fixture %s: %v", key, err)
	}
	return v
}

func (f *fixtures) f64(key string) []float64 {
	f.t.Helper()
	var v []float64
	if err := f.r.Read(key+".npy", &v); err != nil {
		f.t.Fatalf("fixture %s: %v", key, err)
	}
	return v
}

func (f *fixtures) has(key string) bool {
	for _, k := range f.r.Keys() {
		if k == key+".npy" {
			return true
		}
	}
	return false
}

// paramSet builds the fixture's two parameters "p0" and "p1" (registered in that order, so
// p1 comes first in the flat buffer) with their initial values.
func (f *fixtures) paramSet() *nn.ParamSet {
	f.t.Helper()
	var params []*nn.Param
	for i, s := range f.cases.Shapes {
		params = append(params, &nn.Param{Name: pname(i), Shape: s})
	}
	ps, err := nn.NewParamSet(nil, params, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for i, p := range ps.Params {
		copy(p.Data, f.f32("init."+pname(i)))
	}
	return ps
}

func (f *fixtures) setGrads(ps *nn.ParamSet, step int) {
	for i, p := range ps.Params {
		copy(p.Grad, f.f32("grad.s"+itoa(step)+"."+pname(i)))
	}
}

// with returns f reporting to t (a subtest).
func (f *fixtures) with(t *testing.T) *fixtures {
	g := *f
	g.t = t
	return &g
}

func pname(i int) string { return "p" + itoa(i) }

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + itoa(i%10)
}

// closeTo checks |got-want| <= rel*|want| + abs element by element and returns the largest
// relative error seen.
func closeTo(t *testing.T, what string, got, want []float32, rel, abs float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		d := math.Abs(g - w)
		if d > rel*math.Abs(w)+abs || math.IsNaN(g) {
			t.Errorf("%s[%d] = %.9g, want %.9g (diff %.3g)", what, i, g, w, d)
			return worst
		}
		if w != 0 {
			worst = max(worst, d/math.Abs(w))
		}
	}
	return worst
}
