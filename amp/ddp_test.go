package amp

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
)

// With DDP and fp16 autocast, a batch that overflows on rank 1 only (one pixel of 1e6 rounds
// to +inf in fp16) makes both ranks skip that step and back off the scale together; the
// models stay identical and the other steps train.
func TestDDPInfOnOneRankSkipsEverywhere(t *testing.T) {
	ctx := context.Background()
	const ranks, steps, badStep = 2, 5, 2
	groups := comm.NewLocalGroups(ranks)
	var buildMu sync.Mutex // gorgonia graph construction is not safe in parallel (docs/DESIGN.md §1)
	type record struct {
		skipped []bool
		scales  []float32
		params  []float32
	}
	recs := make([]record, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close(ctx)
			errs[g.Rank()] = func() error {
				rank := g.Rank()
				m, err := nn.NewModel(convNet(), nn.WithSeed(int64(10+rank))) // DDP broadcasts rank 0's
				if err != nil {
					return err
				}
				d, err := ddp.New(ctx, m, g)
				if err != nil {
					return err
				}
				s, err := NewShardedScaler(g, WithGrowthInterval(2))
				if err != nil {
					return err
				}
				buildMu.Lock()
				prog, err := d.Compile(classifier(4, 3, 8, 8, 1, s), nn.WithAutocast(Autocast(FP16)))
				buildMu.Unlock()
				if err != nil {
					return err
				}
				defer prog.Close()
				segs, err := optim.Segments(m.Params, 0)
				if err != nil {
					return err
				}
				opt, err := optim.NewSGD(segs, 0.1)
				if err != nil {
					return err
				}
				for step := 0; step < steps; step++ {
					m.Params.ZeroGrad()
					x, _ := prog.Input("images")
					y, _ := prog.Input("labels")
					rng := rand.New(rand.NewSource(int64(100*step + rank)))
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					for i := range y {
						y[i] = float32(rng.Intn(10))
					}
					if step == badStep && rank == 1 {
						x[7] = 1e6
					}
					if err := prog.Run(ctx); err != nil {
						return fmt.Errorf("step %d: %w", step, err)
					}
					s.Unscale(m.Params.Grad)
					skipped, err := s.StepContext(ctx, opt)
					if err != nil {
						return fmt.Errorf("step %d: %w", step, err)
					}
					if err := s.UpdateContext(ctx); err != nil {
						return err
					}
					recs[rank].skipped = append(recs[rank].skipped, skipped)
					recs[rank].scales = append(recs[rank].scales, s.Scale())
				}
				recs[rank].params = append([]float32(nil), m.Params.Data...)
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for step := 0; step < steps; step++ {
		for r := range ranks {
			if got := recs[r].skipped[step]; got != (step == badStep) {
				t.Fatalf("rank %d step %d: skipped %v, want %v", r, step, got, step == badStep)
			}
			if recs[r].scales[step] != recs[0].scales[step] {
				t.Fatalf("step %d: rank %d scale %g, rank 0 %g", step, r, recs[r].scales[step], recs[0].scales[step])
			}
		}
	}
	if want := []float32{65536, 131072, 65536, 65536, 131072}; !equal32(recs[0].scales, want) {
		t.Fatalf("scales %v, want %v", recs[0].scales, want)
	}
	for i, v := range recs[1].params {
		if v != recs[0].params[i] || math.IsNaN(float64(v)) {
			t.Fatalf("parameter %d: rank 1 %g, rank 0 %g", i, v, recs[0].params[i])
		}
	}
}
