//go:build unix

package ops_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BenchmarkImplicitConvAB times a training step (forward, backward, gradients into the
// model's buffer; no optimiser) of the Fashion-MNIST demo's model, resnet8_s2 on 28x28
// images at its batch per rank (64), with the implicit convolution (Note [Implicit
// convolution]) and with the GEMM path, alternating the two in one process so that other
// load on a shared machine hits both alike. Each of b.N iterations is one measurement of
// each path (-steps steps after one untimed step); it reports the medians of the CPU time
// per step (user+system, ms) and their ratio:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench ImplicitConvAB -benchtime 7x
func BenchmarkImplicitConvAB(b *testing.B) {
	const batch, size, steps = 64, 28, 10
	mod, err := models.New("resnet8_s2", 10)
	if err != nil {
		b.Fatal(err)
	}
	m, err := nn.NewModel(mod, nn.WithSeed(1))
	if err != nil {
		b.Fatal(err)
	}
	p, err := nn.Compile(m, nn.Classify(batch, []int{3, size, size}, 0.1))
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
	gemm, implicit := alternatePaths(b, steps, step)
	g, i := median(gemm), median(implicit)
	b.ReportMetric(g, "gemm-cpu-ms/step")
	b.ReportMetric(i, "implicit-cpu-ms/step")
	b.ReportMetric(g/i, "gemm/implicit")
	b.Logf("resnet8_s2 batch %d %dx%d, %d pairs of %d steps: GEMM path %.2f ms CPU per step, implicit %.2f (medians)", batch, size, size, len(gemm), steps, g, i)
}

// BenchmarkImplicitConvLayersAB times each convolution of resnet8_s2 at batch 64 alone
// (forward, data and filter gradient of y⊙r summed, x and w random), alternating the
// implicit convolution and the GEMM path as BenchmarkImplicitConvAB does, and reports the
// medians of the CPU time per run (ms) and their ratio. The graph's product and sum are
// in both:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench ImplicitConvLayersAB -benchtime 5x
func BenchmarkImplicitConvLayersAB(b *testing.B) {
	for _, l := range []struct{ c, o, hw, k, s int }{
		{3, 16, 28, 3, 2}, {16, 16, 14, 3, 1}, {16, 32, 14, 3, 2}, {16, 32, 14, 1, 2}, {32, 32, 7, 3, 1},
		{32, 64, 7, 3, 2}, {32, 64, 7, 1, 2}, {64, 64, 4, 3, 1},
	} {
		b.Run(fmt.Sprintf("%dto%d_%dx%d_k%d_s%d", l.c, l.o, l.hw, l.hw, l.k, l.s), func(b *testing.B) {
			benchConvLayerAB(b, 64, l.c, l.o, l.hw, l.k, l.s)
		})
	}
}

func benchConvLayerAB(b *testing.B, n, c, o, hw, k, s int) {
	const runs = 5
	rng := rand.New(rand.NewSource(1))
	g := G.NewGraph()
	x := gradcheck.Input(g, tensor.Float32, rng, "x", n, c, hw, hw)
	w := gradcheck.Input(g, tensor.Float32, rng, "w", o, c, k, k)
	y, err := ops.Conv2d(x, w, nil, ops.ConvOpts{Stride: [2]int{s, s}, Padding: [2]int{k / 2, k / 2}})
	if err != nil {
		b.Fatal(err)
	}
	r := gradcheck.Input(g, tensor.Float32, rng, "r", y.Shape()...)
	prod, err := G.HadamardProd(y, r)
	if err != nil {
		b.Fatal(err)
	}
	cost, err := ops.Sum(prod)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := G.Grad(cost, x, w); err != nil {
		b.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	run := func() {
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		vm.Reset()
	}
	gemm, implicit := alternatePaths(b, runs, run)
	gm, im := median(gemm), median(implicit)
	b.ReportMetric(gm, "gemm-cpu-ms/run")
	b.ReportMetric(im, "implicit-cpu-ms/run")
	b.ReportMetric(gm/im, "gemm/implicit")
}

// alternatePaths runs fn b.N times on the GEMM path and on the implicit convolution, in
// turn, each time once untimed (the path's buffers) and then n times timed, and returns the
// CPU milliseconds per call of each repetition, GEMM path first.
func alternatePaths(b *testing.B, n int, fn func()) (gemm, implicit []float64) {
	prev := ops.ImplicitOff.Load()
	defer ops.ImplicitOff.Store(prev)
	b.ResetTimer()
	for range b.N {
		for _, off := range []bool{true, false} {
			ops.ImplicitOff.Store(off)
			fn()
			c0 := cpuSeconds()
			for range n {
				fn()
			}
			ms := (cpuSeconds() - c0) / float64(n) * 1e3
			if off {
				gemm = append(gemm, ms)
			} else {
				implicit = append(implicit, ms)
			}
		}
	}
	return gemm, implicit
}

// median is the median of v (the upper one of an even count).
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
