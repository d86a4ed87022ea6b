package zero

import (
	"context"
	"fmt"
	"github.com/gorgonia-parallel/gp/train"
	"math/rand"
	"runtime"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	G "gorgonia.org/gorgonia"
)

// mlp is fc1-ReLU-fc2-ReLU-fc3 with width w: Ψ ≈ 2w², large enough for byte counts to mean
// something and small enough for 2 cores.
func mlp(w int) nn.Module {
	return &nn.Sequential{Names: []string{"fc1", "relu1", "fc2", "relu2", "fc3"}, Layers: []nn.Module{
		&nn.Linear{In: w, Out: w}, &nn.ReLU{}, &nn.Linear{In: w, Out: w}, &nn.ReLU{}, &nn.Linear{In: w, Out: classes},
	}}
}

func regress(batch, w int) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", batch, w)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("labels", batch)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(x)
		if err != nil {
			return nil, err
		}
		return ops.CrossEntropy(logits, y, 0)
	}
}

func feedMLP(p *Program, step, batch, w int) error {
	rng := rand.New(rand.NewSource(int64(step)))
	x := make([]float32, batch*w)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]float32, batch)
	for i := range y {
		y[i] = float32(rng.Intn(classes))
	}
	if err := p.SetInput("images", x); err != nil {
		return err
	}
	return p.SetInput("labels", y)
}

// Persistent model-state bytes per rank, counted from the engine's buffers, equal 16·Ψ/N
// within 5% plus 16 bytes per padding element (N = 1, 2, 4); between steps the step's
// regions hold no memory (mincore), and the Go heap grows by exactly the ranks' shards:
// the model's full parameter and gradient buffers are gone. The peak during a step is
// reported.
func TestMemoryAccounting(t *testing.T) {
	needMmap(t)
	const w, batch = 384, 4
	for _, world := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("world%d", world), func(t *testing.T) {
			groups := comm.NewLocalGroups(world)
			defer closeAll(groups)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			engines := make([]*Engine, world)
			progs := make([]*Program, world)
			err := each(world, func(r int) error {
				m, err := nn.NewModel(mlp(w), nn.WithSeed(int64(r)))
				if err != nil {
					return err
				}
				engines[r], err = New(context.Background(), m, groups[r], WithOptimizer(AdamW(lr)))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for r, e := range engines {
				mem := e.Memory()
				sum += mem.ModelStateBytes()
				f := mem.FormulaBytes()
				if d := float64(mem.ModelStateBytes()) - f; d < -0.05*f || d > 0.05*f+float64(mem.PaddingBytes()) {
					t.Errorf("rank %d: %v", r, mem)
				}
			}
			// A few collections, 10 ms apart, until the heap settles: a goroutine of each
			// that has signalled but not yet exited can keep its last frame (and a model's
			// full buffers) alive through one collection, which failed about 1 run in 30.
			// A buffer that really survives fails all of them.
			var heap int64
			for try := 0; try < 10; try++ {
				if try > 0 {
					time.Sleep(10 * time.Millisecond)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap = int64(after.HeapAlloc) - int64(before.HeapAlloc)
				if d := float64(heap - sum); d >= -0.05*float64(sum) && d <= 0.05*float64(sum) {
					break
				}
			}
			if d := float64(heap - sum); d < -0.05*float64(sum) || d > 0.05*float64(sum) {
				t.Errorf("Go heap grew by %d B, the shards hold %d B: a full-size buffer survived", heap, sum)
			}
			t.Logf("Ψ=%d: heap +%d B for %d ranks' model state of %d B", engines[0].Memory().Psi, heap, world, sum)
			for r := range world {
				if progs[r], err = engines[r].Compile(regress(batch, w)); err != nil {
					t.Fatal(err)
				}
			}
			err = each(world, func(r int) error {
				for s := range 2 {
					engines[r].ZeroGrad()
					if err := feedMLP(progs[r], s*world+r, batch, w); err != nil {
						return err
					}
					if err := train.RunStep(context.Background(), progs[r]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r, e := range engines {
				mem := e.Memory()
				if mem.TransientResidentBytes != 0 {
					t.Errorf("rank %d: %d B of step memory resident between steps", r, mem.TransientResidentBytes)
				}
				if mem.PeakStepBytes <= mem.ModelStateBytes() {
					t.Errorf("rank %d: step peak %d B not above the persistent %d B", r, mem.PeakStepBytes, mem.ModelStateBytes())
				}
				if r == 0 {
					t.Logf("%v; peak/persistent = %.2f, peak-persistent = %.2f·4Ψ", mem, float64(mem.PeakStepBytes)/float64(mem.ModelStateBytes()),
						float64(mem.PeakStepBytes-mem.ModelStateBytes())/float64(4*mem.Psi))
				}
				e.Close()
			}
		})
	}
}
