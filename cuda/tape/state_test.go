package tape_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	G "gorgonia.org/gorgonia"
)

// stateOptimizers are the optimizers the device state copies, each with weight decay on
// every parameter so that the decay path runs.
var stateOptimizers = []struct {
	name string
	new  func(segs []optim.Segment) (optim.Optimizer, error)
}{
	{"sgd-momentum", func(s []optim.Segment) (optim.Optimizer, error) {
		return optim.NewSGD(s, 0.05, optim.WithMomentum(0.9), optim.WithDampening(0.1))
	}},
	{"sgd-nesterov", func(s []optim.Segment) (optim.Optimizer, error) {
		return optim.NewSGD(s, 0.05, optim.WithMomentum(0.9), optim.WithNesterov())
	}},
	{"sgd-plain", func(s []optim.Segment) (optim.Optimizer, error) { return optim.NewSGD(s, 0.05) }},
	{"adamw", func(s []optim.Segment) (optim.Optimizer, error) { return optim.NewAdamW(s, 0.01) }},
	{"adam-amsgrad", func(s []optim.Segment) (optim.Optimizer, error) {
		return optim.NewAdam(s, 0.01, optim.WithAMSGrad())
	}},
}

// The gorgonia MLP trained 5 steps with a device State (parameters, gradients and the
// optimizer on the device) equals nn.Compile with optim's optimizer on the CPU: losses,
// weights, and the optimizer's state after ToHost (step count, momentum or moments),
// within mlpTol (the device's GEMMs sum in other orders; the optimizer's loop is optim's,
// element for element). The host's parameters stay as they were until ToHost.
func TestStateMatchesCPU(t *testing.T) {
	d := device(t)
	const batch, steps, wd = 8, 5, 0.01
	for _, o := range stateOptimizers {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			build := gormlp.Fixed(1, batch)
			mc, md := graphModel(t, build), graphModel(t, build)
			oc, od := newOpt(t, mc, wd, o.new), newOpt(t, md, wd, o.new)
			cpu, err := nn.Compile(mc, build, nn.WithOptimizer(oc))
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			st, err := tape.NewState(d, md)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			dev, err := st.Compile(build, nn.WithOptimizer(od))
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			initial := append([]float32(nil), md.Params.Data...)
			x, y := make([]float32, batch*gormlp.In), make([]float32, batch*gormlp.Out)
			var worstLoss float64
			for s := range steps {
				gormlp.Data(x, y, s*batch, batch)
				for _, p := range []interface {
					SetInput(string, []float32) error
				}{cpu, dev} {
					if err := p.SetInput("x", x); err != nil {
						t.Fatal(err)
					}
					if err := p.SetInput("y", y); err != nil {
						t.Fatal(err)
					}
				}
				if err := cpu.Run(ctx); err != nil {
					t.Fatal(err)
				}
				if err := dev.Run(ctx); err != nil {
					t.Fatal(err)
				}
				if s == 0 {
					g, err := st.Grads().ToHost(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if r := maxRel(g, mc.Params.Grad); r > mlpTol {
						t.Fatalf("first device gradients differ by %.3g (tolerance %g):\ndevice %v\ncpu    %v", r, mlpTol, g, mc.Params.Grad)
					}
					if r := maxRel(md.Params.Grad, make([]float32, len(md.Params.Grad))); r != 0 {
						t.Fatalf("the host gradient buffer was written (max %g): the device state must keep gradients on the device", r)
					}
				}
				lc, _ := cpu.LossValue()
				ld, err := dev.LossValue()
				if err != nil {
					t.Fatal(err)
				}
				worstLoss = math.Max(worstLoss, maxRel([]float32{ld}, []float32{lc}))
				if err := cpu.Step(ctx); err != nil {
					t.Fatal(err)
				}
				if err := dev.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if r := maxRel(md.Params.Data, initial); r != 0 {
				t.Fatalf("host parameters changed by %g before ToHost", r)
			}
			if err := st.ToHost(ctx); err != nil {
				t.Fatal(err)
			}
			w := maxRel(md.Params.Data, mc.Params.Data)
			sc, sd := stateByName(oc.StateDict()), stateByName(od.StateDict())
			if len(sc) != len(sd) {
				t.Fatalf("optimizer state: %d entries on the device's host optimizer, %d on the CPU's", len(sd), len(sc))
			}
			var worstState float64
			for name, ec := range sc {
				ed, ok := sd[name]
				if !ok {
					t.Fatalf("optimizer state %s missing after ToHost", name)
				}
				switch {
				case ec.I64 != nil:
					if ed.I64 == nil || ed.I64[0] != ec.I64[0] {
						t.Fatalf("%s: %v after ToHost, CPU %v", name, ed.I64, ec.I64)
					}
				case ec.F32 != nil:
					worstState = math.Max(worstState, maxRel(ed.F32, ec.F32))
				}
			}
			t.Logf("%d steps: losses within %.3g, weights %.3g, optimizer state %.3g of the CPU's (tolerance %g)", steps, worstLoss, w, worstState, mlpTol)
			if worstLoss > mlpTol || w > mlpTol || worstState > mlpTol {
				t.Fatalf("device state differs from the CPU: losses %.3g, weights %.3g, optimizer state %.3g (tolerance %g)", worstLoss, w, worstState, mlpTol)
			}
			if maxRel(md.Params.Data, initial) == 0 {
				t.Fatal("the weights did not change")
			}
		})
	}
}

// A step applied in pieces (StepRange over two ranges, the second first, as DDP's buckets
// may be) gives the same bits as one Step, and FromHost after ToHost changes nothing.
func TestStateRangedStepIsStep(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	const batch = 8
	for _, o := range stateOptimizers {
		t.Run(o.name, func(t *testing.T) {
			build := gormlp.Fixed(1, batch)
			var params [2][]float32
			for k := range params {
				m := graphModel(t, build)
				st, err := tape.NewState(d, m)
				if err != nil {
					t.Fatal(err)
				}
				p, err := st.Compile(build, nn.WithOptimizer(newOpt(t, m, 0.01, o.new)))
				if err != nil {
					t.Fatal(err)
				}
				x, y := make([]float32, batch*gormlp.In), make([]float32, batch*gormlp.Out)
				for s := range 3 {
					gormlp.Data(x, y, s*batch, batch)
					if err := p.SetInput("x", x); err != nil {
						t.Fatal(err)
					}
					if err := p.SetInput("y", y); err != nil {
						t.Fatal(err)
					}
					if err := p.Run(ctx); err != nil {
						t.Fatal(err)
					}
					if k == 0 {
						err = p.Step(ctx)
					} else {
						err = rangedStep(st, m.Params.Params[0].Offset)
					}
					if err != nil {
						t.Fatal(err)
					}
					if s == 1 {
						// A round trip through the host is the identity.
						if err := st.ToHost(ctx); err != nil {
							t.Fatal(err)
						}
						if err := st.FromHost(); err != nil {
							t.Fatal(err)
						}
					}
				}
				if params[k], err = st.Params().ToHost(ctx); err != nil {
					t.Fatal(err)
				}
				p.Close()
				st.Close()
			}
			if r := maxRel(params[1], params[0]); r != 0 {
				t.Fatalf("ranged step differs from Step by %g", r)
			}
		})
	}
}

// A ranged step out of order is an optim.ErrStepState error and leaves the step as it
// was: the step under way still completes, and AdamW counts it once (its bias correction
// would otherwise use a wrong step).
func TestStateStepOutOfOrder(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	build := gormlp.Fixed(1, 8)
	for _, tc := range []struct {
		name  string
		calls []string // the last one is out of order
		steps int64    // AdamW's count after the misuse and one whole step
	}{
		{"begin twice", []string{"begin", "begin"}, 1},
		{"range without begin", []string{"range"}, 1},
		{"end without begin", []string{"end"}, 1},
		{"end twice", []string{"begin", "range", "end", "end"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, st := graphState(t, d, build)
			host := newOpt(t, m, 0.01, func(s []optim.Segment) (optim.Optimizer, error) { return optim.NewAdamW(s, 0.01) })
			p, err := st.Compile(build, nn.WithOptimizer(host))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			n := st.Grads().Len()
			call := map[string]func() error{
				"begin": st.BeginStep,
				"range": func() error { return st.StepRange(0, n) },
				"end":   st.EndStep,
			}
			for i, c := range tc.calls {
				err := call[c]()
				if last := i == len(tc.calls)-1; last != (err != nil) || (last && !errors.Is(err, optim.ErrStepState)) {
					t.Fatalf("call %d (%s): %v, want an optim.ErrStepState error only at the last call", i, c, err)
				}
			}
			if tc.calls[0] != "begin" || len(tc.calls) > 2 {
				if err := st.BeginStep(); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.StepRange(0, n); err != nil {
				t.Fatal(err)
			}
			if err := st.EndStep(); err != nil {
				t.Fatal(err)
			}
			if err := st.ToHost(ctx); err != nil {
				t.Fatal(err)
			}
			if got := host.(*optim.Adam).Steps(); got != tc.steps {
				t.Fatalf("AdamW counts %d steps, want %d", got, tc.steps)
			}
		})
	}
}

// hostOnly is an optimizer of host memory alone: the device state cannot step it.
type hostOnly struct{}

func (hostOnly) Step() error { return nil }

// A State takes its optimizer from the build options of the first Compile that gives one
// and succeeds, and refuses, naming the options, a gorgonia solver, an optimizer it cannot
// step on the device, and another optimizer at a later Compile; a Compile with the same
// optimizer or none (an evaluation program) is fine, and a state no Compile gave an
// optimizer does not step.
func TestStateCompileOptimizer(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	const batch = 4
	build := gormlp.Fixed(1, batch)
	noGraph := func(*nn.Builder) (*G.Node, error) { return nil, errors.New("no graph") }
	sgd := func(s []optim.Segment) (optim.Optimizer, error) { return optim.NewSGD(s, 0.05) }
	type compile struct {
		opts []nn.BuildOption
		fail bool // built with noGraph: the Compile fails
	}
	with := func(opts ...nn.BuildOption) compile { return compile{opts: opts} }
	for _, tc := range []struct {
		name string
		// compiles returns each Compile of the state of m, in order.
		compiles func(m *nn.Model) []compile
		want     string // the last Compile's error; "" for none
		stepping bool   // the state then has an optimizer
	}{
		{"solver", func(*nn.Model) []compile {
			return []compile{with(nn.WithSolver(G.NewVanillaSolver()))}
		}, "cuda/tape: nn.WithSolver(*gorgonia.VanillaSolver): a gorgonia solver steps the parameters in host memory", false},
		{"host-only optimizer", func(*nn.Model) []compile {
			return []compile{with(nn.WithOptimizer(hostOnly{}))}
		}, "cuda/tape: nn.WithOptimizer(tape_test.hostOnly): the device state steps optim's SGD, Adam or AdamW", false},
		{"another optimizer at a second Compile", func(m *nn.Model) []compile {
			return []compile{with(nn.WithOptimizer(newOpt(t, m, 0, sgd))), with(nn.WithOptimizer(newOpt(t, m, 0, sgd)))}
		}, "the device state already steps with the *optim.SGD", true},
		{"solver after an optimizer", func(m *nn.Model) []compile {
			return []compile{with(nn.WithOptimizer(newOpt(t, m, 0, sgd))), with(nn.WithSolver(G.NewVanillaSolver()))}
		}, "cuda/tape: nn.WithSolver(*gorgonia.VanillaSolver)", true},
		{"the same optimizer and an evaluation program", func(m *nn.Model) []compile {
			o := newOpt(t, m, 0, sgd)
			return []compile{with(nn.WithOptimizer(o)), with(nn.WithOptimizer(o)), with(nn.Training(false))}
		}, "", true},
		{"evaluation first, then training", func(m *nn.Model) []compile {
			return []compile{with(nn.Training(false)), with(nn.WithOptimizer(newOpt(t, m, 0, sgd)))}
		}, "", true},
		{"evaluation only", func(*nn.Model) []compile {
			return []compile{with(nn.Training(false))}
		}, "", false},
		{"a failed Compile takes no optimizer", func(m *nn.Model) []compile {
			return []compile{{opts: []nn.BuildOption{nn.WithOptimizer(newOpt(t, m, 0, sgd))}, fail: true}}
		}, "no graph", false},
		{"another optimizer after a failed Compile", func(m *nn.Model) []compile {
			return []compile{{opts: []nn.BuildOption{nn.WithOptimizer(newOpt(t, m, 0, sgd))}, fail: true}, with(nn.WithOptimizer(newOpt(t, m, 0, sgd)))}
		}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, st := graphState(t, d, build)
			cs := tc.compiles(m)
			for i, c := range cs {
				b := build
				if c.fail {
					b = noGraph
				}
				p, err := st.Compile(b, c.opts...)
				if err == nil {
					p.Close()
				}
				last := i == len(cs)-1
				switch {
				case !last && c.fail != (err != nil):
					t.Fatalf("Compile %d: %v (built to fail: %v)", i, err, c.fail)
				case !last:
				case tc.want == "" && err != nil:
					t.Fatalf("last Compile: %v", err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Fatalf("last Compile: %v, want an error containing %q", err, tc.want)
				case err != nil:
					t.Log(err)
				}
			}
			if st.HasOptimizer() != tc.stepping {
				t.Fatalf("HasOptimizer %v, want %v", st.HasOptimizer(), tc.stepping)
			}
			err := st.Step(ctx)
			if tc.stepping && err != nil {
				t.Fatalf("Step: %v", err)
			}
			if !tc.stepping && (err == nil || !strings.Contains(err.Error(), "the device state has no optimizer: give nn.WithOptimizer")) {
				t.Fatalf("Step without an optimizer: %v", err)
			}
		})
	}
}

// rangedStep steps [cut, n) then [0, cut), then zeroes the gradients.
func rangedStep(st *tape.State, cut int) error {
	n := st.Grads().Len()
	if err := st.BeginStep(); err != nil {
		return err
	}
	if err := st.StepRange(cut, n); err != nil {
		return err
	}
	if err := st.StepRange(0, cut); err != nil {
		return err
	}
	if err := st.EndStep(); err != nil {
		return err
	}
	return st.ZeroGrad()
}

// graphState is build's graph model and a device state of it, closed when t ends.
func graphState(t *testing.T, d *cuda.Device, build nn.BuildFunc) (*nn.Model, *tape.State) {
	t.Helper()
	m := graphModel(t, build)
	st, err := tape.NewState(d, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return m, st
}

func graphModel(t *testing.T, build nn.BuildFunc) *nn.Model {
	t.Helper()
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newOpt(t *testing.T, m *nn.Model, wd float64, f func([]optim.Segment) (optim.Optimizer, error)) optim.Optimizer {
	t.Helper()
	segs, err := optim.Segments(m.Params, wd)
	if err != nil {
		t.Fatal(err)
	}
	o, err := f(segs)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func stateByName(es []nn.StateEntry) map[string]nn.StateEntry {
	out := map[string]nn.StateEntry{}
	for _, e := range es {
		out[e.Name] = e
	}
	return out
}
