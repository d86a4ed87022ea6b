package gsolver_test

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/optim/gsolver"
	G "gorgonia.org/gorgonia"
)

const batch = 8

// run takes steps from..to-1 of the perceptron p with s and returns their losses.
func run(t *testing.T, p *gormlp.Plain, s G.Solver, from, to int) []float32 {
	t.Helper()
	var losses []float32
	for step := from; step < to; step++ {
		l, err := p.Step(s, step*batch)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		losses = append(losses, l)
	}
	return losses
}

// For each of gorgonia's five solvers: k steps, a checkpoint file (weights and the solver's
// state), a fresh program and a fresh solver restored from it, m more steps: the losses and
// weights are bit-identical to an uninterrupted run of k+m steps. A solver restored without
// its state (the control) diverges from it, so the state is what makes the match.
func TestResumeIsBitIdentical(t *testing.T) {
	const k, m, seed = 5, 6, 3
	for _, sv := range gormlp.Solvers {
		t.Run(sv.Name, func(t *testing.T) {
			whole, err := gormlp.NewPlain(seed, batch)
			if err != nil {
				t.Fatal(err)
			}
			wantLoss := run(t, whole, sv.New(), 0, k+m)
			want := gormlp.Weights(whole.W1, whole.W2)

			first, err := gormlp.NewPlain(seed, batch)
			if err != nil {
				t.Fatal(err)
			}
			s1 := sv.New()
			st1, err := gsolver.Of(s1)
			if err != nil {
				t.Fatal(err)
			}
			run(t, first, s1, 0, k)
			path := filepath.Join(t.TempDir(), "ckpt.npz")
			entries := append(st1.StateDict(),
				nn.StateEntry{Name: "w1", Shape: first.W1.Shape().Clone(), F32: first.W1.Value().Data().([]float32)},
				nn.StateEntry{Name: "w2", Shape: first.W2.Shape().Clone(), F32: first.W2.Value().Data().([]float32)})
			if err := checkpoint.Save(path, entries); err != nil {
				t.Fatal(err)
			}

			for _, restore := range []bool{true, false} {
				loaded, err := checkpoint.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				second, err := gormlp.NewPlain(seed, batch)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range loaded {
					switch e.Name {
					case "w1":
						copy(second.W1.Value().Data().([]float32), e.F32)
					case "w2":
						copy(second.W2.Value().Data().([]float32), e.F32)
					}
				}
				s2 := sv.New()
				st2, err := gsolver.Of(s2)
				if err != nil {
					t.Fatal(err)
				}
				st2.Expect(2)
				if restore {
					if err := st2.LoadStateDict(loaded); err != nil {
						t.Fatal(err)
					}
				}
				gotLoss := run(t, second, s2, k, k+m)
				got := gormlp.Weights(second.W1, second.W2)
				same := sameBits(got, want) && sameBits(gotLoss, wantLoss[k:])
				switch {
				case restore && !same:
					t.Errorf("resumed run differs from the uninterrupted one: losses %v, want %v", gotLoss, wantLoss[k:])
				case !restore && same && sv.Name != "vanilla":
					t.Errorf("a fresh solver without the restored state matches too: the test proves nothing")
				}
			}
		})
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

type ownSolver struct{}

func (ownSolver) Step([]G.ValueGrad) error { return nil }

// Solvers whose state gsolver cannot capture are refused by Of, naming the type; a
// checkpoint of another solver or of another model is refused by LoadStateDict, naming the
// key, and leaves the solver as it was.
func TestRefusals(t *testing.T) {
	for _, s := range []G.Solver{G.NewBarzilaiBorweinSolver(), ownSolver{}, (*G.AdamSolver)(nil)} {
		_, err := gsolver.Of(s)
		if !errors.Is(err, gsolver.ErrUnsupported) {
			t.Errorf("Of(%T) = %v, want ErrUnsupported", s, err)
		}
	}
	p, err := gormlp.NewPlain(1, batch)
	if err != nil {
		t.Fatal(err)
	}
	adam := G.NewAdamSolver(G.WithLearnRate(0.01))
	st, _ := gsolver.Of(adam)
	run(t, p, adam, 0, 2)
	saved := st.StateDict()

	mom := G.NewMomentum(G.WithLearnRate(0.02))
	ms, _ := gsolver.Of(mom)
	if err := ms.LoadStateDict(saved); err == nil || !strings.Contains(err.Error(), "optim.gorgonia.momentum.lr") {
		t.Errorf("momentum from adam's state: %v, want an error naming optim.gorgonia.momentum.lr", err)
	}
	adam2 := G.NewAdamSolver(G.WithLearnRate(0.5))
	st2, _ := gsolver.Of(adam2)
	st2.Expect(3)
	if err := st2.LoadStateDict(saved); err == nil || !strings.Contains(err.Error(), "2 learnables, this one steps 3") {
		t.Errorf("a checkpoint of 2 learnables into a solver of 3: %v", err)
	}
	if st2.LR() != 0.5 {
		t.Errorf("a refused restore changed the learning rate to %g", st2.LR())
	}
}

// A schedule drives a gorgonia solver's learning rate through its State, and the restored
// learning rate is the saved one.
func TestScheduleDrivesSolver(t *testing.T) {
	s := G.NewMomentum(G.WithLearnRate(0.1))
	st, err := gsolver.Of(s)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := optim.NewStepLR(st, 1, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	sched.Step()
	sched.Step()
	if st.LR() != 0.025 {
		t.Fatalf("lr after 2 halvings %g, want 0.025", st.LR())
	}
	saved := st.StateDict()
	s2 := G.NewMomentum(G.WithLearnRate(0.1))
	st2, _ := gsolver.Of(s2)
	if err := st2.LoadStateDict(saved); err != nil {
		t.Fatal(err)
	}
	if st2.LR() != 0.025 {
		t.Errorf("restored lr %g, want 0.025", st2.LR())
	}
}
