package trainer

import (
	"context"
	"errors"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim/gsolver"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	G "gorgonia.org/gorgonia"
)

// A gorgonia solver given to the trainer steps the model and is checkpointed: 2 steps, a
// resume with a fresh solver, 2 more steps end bitwise where 4 uninterrupted steps end
// (every entry of the final checkpoint: parameters, buffers, the solver's moments and
// step count, the schedule).
func TestGorgoniaSolverResumesBitIdentical(t *testing.T) {
	for _, name := range []string{"adam", "momentum"} {
		t.Run(name, func(t *testing.T) {
			solver := func() G.Solver {
				if name == "adam" {
					return G.NewAdamSolver(G.WithLearnRate(0.01))
				}
				return G.NewMomentum(G.WithLearnRate(0.02), G.WithMomentum(0.9))
			}
			run := func(out string, maxSteps int, resume string) *Result {
				cfg := tinyConfig(t, out)
				cfg.Arch, cfg.MaxSteps, cfg.Resume, cfg.LR = "resnet8", maxSteps, resume, 0
				cfg.Solver = solver()
				return runWorld(t, 1, cfg)[0]
			}
			whole := run(t.TempDir(), 4, "none")
			split := t.TempDir()
			run(split, 2, "none")
			resumed := run(split, 4, "auto")
			if resumed.ResumedFrom != filepath.Join(split, "ckpt-000000002.npz") {
				t.Fatalf("resumed from %q, want step 2's checkpoint", resumed.ResumedFrom)
			}
			want, err := checkpoint.Load(whole.Checkpoint)
			if err != nil {
				t.Fatal(err)
			}
			got, err := checkpoint.Load(resumed.Checkpoint)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string][]float64{}
			for _, e := range got {
				byName[e.Name] = values(e.F32, e.F64, e.I64)
			}
			solverKeys := 0
			for _, e := range want {
				if strings.HasPrefix(e.Name, gsolver.KeyPrefix) {
					solverKeys++
				}
				w, g := values(e.F32, e.F64, e.I64), byName[e.Name]
				if len(w) != len(g) {
					t.Errorf("%s: %d values, want %d", e.Name, len(g), len(w))
					continue
				}
				for i := range w {
					if math.Float64bits(w[i]) != math.Float64bits(g[i]) {
						t.Errorf("%s[%d] = %v, want %v (bitwise)", e.Name, i, g[i], w[i])
						break
					}
				}
			}
			if solverKeys < 2 {
				t.Errorf("the checkpoint holds %d keys of the solver's state", solverKeys)
			}
		})
	}
}

func values(f32 []float32, f64 []float64, i64 []int64) []float64 {
	var out []float64
	for _, v := range f32 {
		out = append(out, float64(v))
	}
	out = append(out, f64...)
	for _, v := range i64 {
		out = append(out, float64(v))
	}
	return out
}

// A solver whose state cannot be captured, or one given to a strategy or device that cannot
// step it, is refused before any training, naming runConfig.Solver.
func TestGorgoniaSolverRefusedAtStart(t *testing.T) {
	for _, tc := range []struct {
		solver   G.Solver
		strategy string
		want     error
		wantText string
	}{
		{G.NewBarzilaiBorweinSolver(), "ddp", gsolver.ErrUnsupported, "Solver (a gorgonia solver)"},
		{G.NewAdamSolver(), "zero3", nil, "needs strategy ddp or none"},
		{G.NewAdamSolver(), "dp", nil, "needs strategy ddp or none"},
	} {
		cfg := tinyConfig(t, t.TempDir())
		cfg.Arch, cfg.Solver, cfg.Strategy = "resnet8", tc.solver, tc.strategy
		cfg.Group = comm.NewLocalGroups(1)[0]
		_, err := fitRun(context.Background(), cfg, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.wantText) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%T under %s: %v, want an error saying %q", tc.solver, tc.strategy, err, tc.wantText)
		}
	}
}
