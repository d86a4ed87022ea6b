//go:build unix

package ops_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/ops"
)

// swinLinears are swin_t's linear layers at batch 8 and 224x224 (rows = tokens of the
// batch, in and out channels): each stage's qkv, proj, fc1 and fc2, and the patch merging
// into stages 2 to 4.
var swinLinears = []struct {
	name          string
	rows, in, out int
}{
	{"s1_qkv", 25088, 96, 288}, {"s1_proj", 25088, 96, 96}, {"s1_fc1", 25088, 96, 384}, {"s1_fc2", 25088, 384, 96},
	{"s2_merge", 6272, 384, 192},
	{"s2_qkv", 6272, 192, 576}, {"s2_proj", 6272, 192, 192}, {"s2_fc1", 6272, 192, 768}, {"s2_fc2", 6272, 768, 192},
	{"s3_merge", 1568, 768, 384},
	{"s3_qkv", 1568, 384, 1152}, {"s3_proj", 1568, 384, 384}, {"s3_fc1", 1568, 384, 1536}, {"s3_fc2", 1568, 1536, 384},
	{"s4_merge", 392, 1536, 768},
	{"s4_qkv", 392, 768, 2304}, {"s4_proj", 392, 768, 768}, {"s4_fc1", 392, 768, 3072}, {"s4_fc2", 392, 3072, 768},
}

// BenchmarkLinearWeightGradAB times the weight gradient (dw = dyᵀ·x) of each of swin_t's
// linear layers with the BLAS (gemmPar) and with simd.GemmDW32 at the active SIMD level,
// whether or not GemmDWFits takes the shape, alternating the two in one process
// (alternatePaths, 3 calls a measurement) so that other load on a shared machine hits both
// alike. It reports the medians of the CPU time per call (ms), each path's GFLOP/s
// (2·rows·in·out per call) and the ratio BLAS/kernel:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench LinearWeightGradAB -benchtime 5x
func BenchmarkLinearWeightGradAB(b *testing.B) {
	blasSide(b)
	for _, l := range swinLinears {
		b.Run(fmt.Sprintf("%s_%dx%dx%d", l.name, l.out, l.in, l.rows), func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			dy := make([]float32, l.rows*l.out)
			x := make([]float32, l.rows*l.in)
			for _, v := range [][]float32{dy, x} {
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
			}
			dw := make([]float32, l.out*l.in)
			if !ops.LinearWeightGrad(l.rows, l.in, l.out, dy, x, dw) {
				b.Skip("the kernel does not run at this SIMD level")
			}
			blas, kern := alternatePaths(b, ops.LinearDWOff, 3, func() { ops.LinearWeightGrad(l.rows, l.in, l.out, dy, x, dw) })
			bm, km := median(blas), median(kern)
			mflop := 2 * float64(l.rows) * float64(l.in) * float64(l.out) / 1e6
			b.ReportMetric(bm, "blas-cpu-ms")
			b.ReportMetric(km, "kernel-cpu-ms")
			b.ReportMetric(mflop/bm, "blas-GFLOP/s")
			b.ReportMetric(mflop/km, "kernel-GFLOP/s")
			b.ReportMetric(bm/km, "blas/kernel")
		})
	}
}

// BenchmarkSwinLinearDWAB times swin_t's training step (batch 8, 224x224, forward, backward,
// gradients into the model's buffer; no optimiser) with every weight gradient on the BLAS
// and with the weight gradients simd.GemmDWFits takes on simd.GemmDW32, alternating the two
// in one process (benchStepAB, one step a measurement), and reports the medians of the CPU
// time per step and their ratio:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench SwinLinearDWAB -benchtime 5x
func BenchmarkSwinLinearDWAB(b *testing.B) {
	blasSide(b)
	blas, kern := benchStepAB(b, "swin_t", 8, 224, 1, ops.LinearDWOff)
	b.ReportMetric(blas, "blas-cpu-ms/step")
	b.ReportMetric(kern, "kernel-cpu-ms/step")
	b.ReportMetric(blas/kern, "blas/kernel")
}

// BenchmarkOwnGEMMAB times a training step (forward, backward, gradients into the model's
// buffer; no optimiser) of resnet18 and resnet50 (batch 16, 64x64, as bench/models) and
// swin_t (batch 8, 224x224) with ownGEMM's dispatch off (every product where simd's Fits
// functions send it) and on, alternating the two in one process (benchStepAB), and reports
// the medians of the CPU time per step and their ratio. ownGEMM holds only at level AVX512
// where OpenBLAS runs narrower kernels (an AMD Zen 5 with OPENBLAS_CORETYPE=Haswell, or any
// AVX-512 CPU given that variable); elsewhere the two sides are the same code:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench OwnGEMMAB -benchtime 3x
func BenchmarkOwnGEMMAB(b *testing.B) {
	for _, w := range []struct {
		arch               string
		batch, size, steps int
	}{{"resnet18", 16, 64, 3}, {"resnet50", 16, 64, 2}, {"swin_t", 8, 224, 1}} {
		b.Run(w.arch, func(b *testing.B) {
			blas, own := benchStepAB(b, w.arch, w.batch, w.size, w.steps, ops.OwnGEMMOff)
			b.ReportMetric(blas, "blas-cpu-ms/step")
			b.ReportMetric(own, "own-cpu-ms/step")
			b.ReportMetric(blas/own, "blas/own")
		})
	}
}

// BenchmarkGatherAB times a training step of resnet18 and resnet50 (batch 16, 64x64, as
// bench/models) with the gathered forward of small maps (Note [Small maps without the
// padding's products]) off and on, alternating the two in one process (benchStepAB), and
// reports the medians of the CPU time per step and their ratio. It is taken only under
// ownGEMM; elsewhere the two sides are the same code:
//
//	GOMAXPROCS=1 OPENBLAS_NUM_THREADS=1 go test ./nn/ops -run '^$' -bench GatherAB -benchtime 3x
func BenchmarkGatherAB(b *testing.B) {
	for _, arch := range []string{"resnet18", "resnet50"} {
		b.Run(arch, func(b *testing.B) {
			gemm, gather := benchStepAB(b, arch, 16, 64, 3, ops.GatherOff)
			b.ReportMetric(gemm, "gemm-cpu-ms/step")
			b.ReportMetric(gather, "gather-cpu-ms/step")
			b.ReportMetric(gemm/gather, "gemm/gather")
		})
	}
}
