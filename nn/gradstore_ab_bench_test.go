package nn_test

import (
	"context"
	"math/rand"
	"slices"
	"syscall"
	"testing"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
)

// BenchmarkGradStoreAB times a training step (ParamSet.ZeroGrad then Run, on the model's own
// gradient buffer; no optimiser) with the first gradient write after ZeroGrad stored and
// with it added, alternating the two in one process: b.N rounds, each timing steps steps of
// either path after one untimed step, CPU time (user + system) medians. Run it at one thread
// with GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1. It reports the medians of each path and the
// median of the per-pair ratio added/stored (above 1: storing is faster).
func BenchmarkGradStoreAB(b *testing.B) {
	for _, c := range []struct {
		arch               string
		batch, size, steps int
	}{
		{"resnet18", 16, 64, 4},
		{"resnet8_s2", 64, 28, 10},
	} {
		b.Run(c.arch, func(b *testing.B) {
			mod, err := models.New(c.arch, 10)
			if err != nil {
				b.Fatal(err)
			}
			m, err := nn.NewModel(mod, nn.WithSeed(1))
			if err != nil {
				b.Fatal(err)
			}
			p, err := nn.Compile(m, nn.Classify(c.batch, []int{3, c.size, c.size}, 0.1))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			rng := rand.New(rand.NewSource(1))
			img, err := p.Input("images")
			if err != nil {
				b.Fatal(err)
			}
			for i := range img {
				img[i] = float32(rng.NormFloat64())
			}
			lab, err := p.Input("labels")
			if err != nil {
				b.Fatal(err)
			}
			for i := range lab {
				lab[i] = float32(rng.Intn(10))
			}
			ctx := context.Background()
			step := func() {
				m.Params.ZeroGrad()
				if err := p.Run(ctx); err != nil {
					b.Fatal(err)
				}
			}
			prev := nn.GradStoreOff.Load()
			defer nn.GradStoreOff.Store(prev)
			var stored, added []float64
			b.ResetTimer()
			for range b.N {
				for _, off := range []bool{false, true} {
					nn.GradStoreOff.Store(off)
					step()
					c0 := cpuSeconds()
					for range c.steps {
						step()
					}
					ms := (cpuSeconds() - c0) / float64(c.steps) * 1e3
					if off {
						added = append(added, ms)
					} else {
						stored = append(stored, ms)
					}
				}
			}
			ratios := make([]float64, len(stored))
			for i := range stored {
				ratios[i] = added[i] / stored[i]
			}
			s, a, r := median(stored), median(added), median(ratios)
			b.Logf("%s batch %d %dx%d, %d pairs of %d steps: %.2f ms CPU per step stored, %.2f added (medians); added/stored per pair: median %.3f, range %.3f-%.3f", c.arch, c.batch, c.size, c.size, len(stored), c.steps, s, a, r, slices.Min(ratios), slices.Max(ratios))
			b.ReportMetric(s, "stored-cpu-ms/step")
			b.ReportMetric(a, "added-cpu-ms/step")
			b.ReportMetric(r, "added/stored")
		})
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// median is the median of v (the upper one of an even count).
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
