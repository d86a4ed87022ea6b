//go:build unix

package ops_test

import (
	"context"
	"fmt"
	"math/rand"
	"syscall"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// BenchmarkResNet18Train times one resnet18 training step (forward, backward, gradients
// into the model's buffer; no optimiser) on random images and labels, and reports img/s.
// Small inputs are where the convolutions of layer3 and layer4 have 1 to 16 output pixels,
// the case the batched-GEMM path of Conv2d exists for. Run with OPENBLAS_NUM_THREADS=1 to
// compare against a single-thread GEMM roof. Besides img/s it reports img/cpu-s, images per
// second of this process's CPU time (user+system), which is the number to compare on a
// shared machine where wall time depends on what else runs:
//
//	OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench ResNet18Train -benchtime 5x
func BenchmarkResNet18Train(b *testing.B) {
	for _, s := range []int{32, 64} {
		for _, n := range []int{16, 32} {
			b.Run(fmt.Sprintf("%dx%d/batch%d", s, s, n), func(b *testing.B) { benchResNet18(b, n, s) })
		}
	}
}

func benchResNet18(b *testing.B, n, s int) {
	b.Logf("BLAS %s, %d threads", blasimpl.Name(), blasimpl.Threads())
	mod, err := models.New("resnet18", 10)
	if err != nil {
		b.Fatal(err)
	}
	m, err := nn.NewModel(mod, nn.WithSeed(1))
	if err != nil {
		b.Fatal(err)
	}
	p, err := nn.Compile(m, func(bl *nn.Builder) (*G.Node, error) {
		x, err := bl.Input("images", n, 3, s, s)
		if err != nil {
			return nil, err
		}
		y, err := bl.Input("labels", n)
		if err != nil {
			return nil, err
		}
		logits, err := bl.Forward(x)
		if err != nil {
			return nil, err
		}
		return ops.CrossEntropy(logits, y, 0)
	})
	if err != nil {
		b.Fatal(err)
	}
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
	if err := p.Run(ctx); err != nil { // first run allocates the ops' buffers
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for range b.N {
		if err := p.Run(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuSeconds() - cpu0
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "img/s")
	b.ReportMetric(float64(n*b.N)/cpu, "img/cpu-s")
}

// cpuSeconds is the user+system CPU time of the process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
