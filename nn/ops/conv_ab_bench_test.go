//go:build unix

package ops_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync/atomic"
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
	everyLevel(b)
	g, i := benchStepAB(b, "resnet8_s2", 64, 28, 10, ops.ImplicitOff)
	b.ReportMetric(g, "gemm-cpu-ms/step")
	b.ReportMetric(i, "implicit-cpu-ms/step")
	b.ReportMetric(g/i, "gemm/implicit")
}

// everyLevel takes the implicit convolution at the SIMD level GP_SIMD selects until b ends,
// below AVX-512 too (where it is not taken otherwise), so that the A/B measures its kernels
// at that level: GP_SIMD=avx2 OPENBLAS_CORETYPE=Haswell measures the AVX2 kernels against
// OpenBLAS's Haswell ones.
func everyLevel(b *testing.B) {
	prev := ops.ImplicitAnyLevel.Swap(true)
	b.Cleanup(func() { ops.ImplicitAnyLevel.Store(prev) })
}

// blasSide keeps ownGEMM off until b ends, so that the BLAS side of an A/B whose switch
// sends products to the BLAS (ConvRowsOff, LinearDWOff) is the BLAS on every machine, not
// simd's kernels where OpenBLAS runs narrower ones (blasimpl.Narrow).
func blasSide(b *testing.B) {
	prev := ops.OwnGEMMOff.Swap(true)
	b.Cleanup(func() { ops.OwnGEMMOff.Store(prev) })
}

// benchStepAB times arch's training step on random size×size images at batch, steps
// steps a measurement, with off set and cleared in turn (alternatePaths), and returns the
// medians of the CPU milliseconds per step with off set and with it clear.
func benchStepAB(b *testing.B, arch string, batch, size, steps int, off *atomic.Bool) (float64, float64) {
	mod, err := models.New(arch, 10)
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
	with, without := alternatePaths(b, off, steps, step)
	w, wo := median(with), median(without)
	b.Logf("%s batch %d %dx%d, %d pairs of %d steps: %.2f ms CPU per step with the switch set, %.2f without (medians)", arch, batch, size, size, len(with), steps, w, wo)
	return w, wo
}

// BenchmarkImplicitConvLayersAB times each convolution of resnet8_s2 at batch 64 alone
// (forward, data and filter gradient of y⊙r summed, x and w random), alternating the
// implicit convolution and the GEMM path as BenchmarkImplicitConvAB does, and reports the
// medians of the CPU time per run (ms) and their ratio. The graph's product and sum are
// in both:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench ImplicitConvLayersAB -benchtime 5x
func BenchmarkImplicitConvLayersAB(b *testing.B) {
	everyLevel(b)
	for _, l := range []struct{ c, o, hw, k, s int }{
		{3, 16, 28, 3, 2}, {16, 16, 14, 3, 1}, {16, 32, 14, 3, 2}, {16, 32, 14, 1, 2}, {32, 32, 7, 3, 1},
		{32, 64, 7, 3, 2}, {32, 64, 7, 1, 2}, {64, 64, 4, 3, 1},
	} {
		b.Run(fmt.Sprintf("%dto%d_%dx%d_k%d_s%d", l.c, l.o, l.hw, l.hw, l.k, l.s), func(b *testing.B) {
			benchConvLayerAB(b, 64, l.c, l.o, l.hw, l.k, l.s)
		})
	}
}

// BenchmarkImplicitConvResNet18AB times each convolution of resnet18 on 64x64 images at
// batch 16 (bench/models' workload) as BenchmarkImplicitConvLayersAB does, the implicit
// convolution taken past its size bounds, and reports besides the CPU times the GFLOP/s of
// each path (forward, data and filter gradient: 3 × 2·N·O·C·kh·kw·Ho·Wo):
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench ImplicitConvResNet18AB -benchtime 3x
func BenchmarkImplicitConvResNet18AB(b *testing.B) {
	prev := ops.ImplicitWide.Load()
	defer ops.ImplicitWide.Store(prev)
	ops.ImplicitWide.Store(true)
	for _, l := range []struct{ c, o, hw, k, s int }{
		{64, 64, 16, 3, 1}, {64, 128, 16, 3, 2}, {64, 128, 16, 1, 2}, {128, 128, 8, 3, 1},
		{128, 256, 8, 3, 2}, {128, 256, 8, 1, 2}, {256, 256, 4, 3, 1},
		{256, 512, 4, 3, 2}, {256, 512, 4, 1, 2}, {512, 512, 2, 3, 1},
	} {
		b.Run(fmt.Sprintf("%dto%d_%dx%d_k%d_s%d", l.c, l.o, l.hw, l.hw, l.k, l.s), func(b *testing.B) {
			benchConvLayerAB(b, 16, l.c, l.o, l.hw, l.k, l.s)
		})
	}
}

// BenchmarkConvRowsAB times the forward alone of resnet18's convolutions whose products
// simd.GemmRows32 takes (64 output pixels: layer2 per image, layer4 at batch 16 batched) on
// 64x64 images at batch 16, with the kernel and with the BLAS, alternating the two in one
// process (alternatePaths), and reports the medians of the CPU time per run (ms) and their
// ratio:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench ConvRowsAB -benchtime 9x
func BenchmarkConvRowsAB(b *testing.B) {
	blasSide(b)
	for _, l := range []struct{ c, o, hw, s int }{{128, 128, 8, 1}, {64, 128, 16, 2}, {512, 512, 2, 1}, {256, 512, 4, 2}} {
		b.Run(fmt.Sprintf("%dto%d_%dx%d_k3_s%d", l.c, l.o, l.hw, l.hw, l.s), func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			g := G.NewGraph()
			x := gradcheck.Input(g, tensor.Float32, rng, "x", 16, l.c, l.hw, l.hw)
			w := gradcheck.Input(g, tensor.Float32, rng, "w", l.o, l.c, 3, 3)
			if _, err := ops.Conv2d(x, w, nil, ops.ConvOpts{Stride: [2]int{l.s, l.s}, Padding: [2]int{1, 1}}); err != nil {
				b.Fatal(err)
			}
			vm := G.NewTapeMachine(g)
			defer vm.Close()
			blas, rows := alternatePaths(b, ops.ConvRowsOff, 10, func() {
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
				vm.Reset()
			})
			bm, rm := median(blas), median(rows)
			b.ReportMetric(bm, "blas-cpu-ms/run")
			b.ReportMetric(rm, "rows-cpu-ms/run")
			b.ReportMetric(bm/rm, "blas/rows")
		})
	}
}

// BenchmarkShiftPadAB times resnet18's 64-channel 16x16 convolution at batch 16 (forward,
// data and filter gradient, as BenchmarkImplicitConvLayersAB) and its training step on
// 64x64 images (bench/models' workload; forward, backward, no optimiser) with the implicit
// convolution reading padded planes and masking its loads, alternating the two in one
// process (alternatePaths), and reports the medians of the CPU time (ms) and their ratio:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench ShiftPadAB -benchtime 9x
func BenchmarkShiftPadAB(b *testing.B) {
	b.Run("64to64_16x16_k3_s1", func(b *testing.B) {
		run, done := convLayerRun(b, 16, 64, 64, 16, 3, 1)
		defer done()
		masked, padded := alternatePaths(b, ops.ShiftPadOff, 5, run)
		m, p := median(masked), median(padded)
		b.ReportMetric(m, "masked-cpu-ms/run")
		b.ReportMetric(p, "padded-cpu-ms/run")
		b.ReportMetric(m/p, "masked/padded")
	})
	b.Run("resnet18_step", func(b *testing.B) {
		m, p := benchStepAB(b, "resnet18", 16, 64, 4, ops.ShiftPadOff)
		b.ReportMetric(m, "masked-cpu-ms/step")
		b.ReportMetric(p, "padded-cpu-ms/step")
		b.ReportMetric(m/p, "masked/padded")
	})
}

func benchConvLayerAB(b *testing.B, n, c, o, hw, k, s int) {
	const runs = 5
	run, done := convLayerRun(b, n, c, o, hw, k, s)
	defer done()
	gemm, implicit := alternatePaths(b, ops.ImplicitOff, runs, run)
	gm, im := median(gemm), median(implicit)
	b.ReportMetric(gm, "gemm-cpu-ms/run")
	b.ReportMetric(im, "implicit-cpu-ms/run")
	b.ReportMetric(gm/im, "gemm/implicit")
	oh := (hw+2*(k/2)-k)/s + 1
	gf := 3 * 2 * float64(n*o*c*k*k*oh*oh) / 1e6 // MFLOP per run: GFLOP/s at ms
	b.ReportMetric(gf/gm, "gemm-GFLOP/s")
	b.ReportMetric(gf/im, "implicit-GFLOP/s")
}

// convLayerRun builds one convolution's forward, data and filter gradient of y⊙r summed (x
// and w random, n×c×hw×hw, o output channels, k×k, stride s, padding k/2) and returns a
// function that runs it once, and one that closes its machine.
func convLayerRun(b *testing.B, n, c, o, hw, k, s int) (run, done func()) {
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
	return func() {
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		vm.Reset()
	}, func() { vm.Close() }
}

// alternatePaths runs fn b.N times with off set (the old path: the GEMM path for
// ops.ImplicitOff) and cleared, in turn, each time once untimed (the path's buffers) and
// then n times timed, and returns the CPU milliseconds per call of each repetition, with off
// set first.
func alternatePaths(b *testing.B, off *atomic.Bool, n int, fn func()) (set, clear []float64) {
	prev := off.Load()
	defer off.Store(prev)
	b.ResetTimer()
	for range b.N {
		for _, o := range []bool{true, false} {
			off.Store(o)
			fn()
			c0 := cpuSeconds()
			for range n {
				fn()
			}
			ms := (cpuSeconds() - c0) / float64(n) * 1e3
			if o {
				set = append(set, ms)
			} else {
				clear = append(clear, ms)
			}
		}
	}
	return set, clear
}

// median is the median of v (the upper one of an even count).
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
