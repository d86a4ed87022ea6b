//go:build cgo && amd64 && !purego && linux

package simd

import (
	"fmt"
	"math/rand"
	"testing"
)

// BenchmarkConvShiftDemo times the AVX-512 implicit forward (ConvShiftFwd) and filter
// gradient (ConvShiftWGrad) alone, one after the other in each repetition, on the shapes of
// resnet8_s2's convolutions at batch 64: 3x3 with padding 1 at stride 1 on the output's
// size (a stride-2 layer reads its phase planes, of the output's size, the same way) and
// 1x1. It reports the medians of their GFLOP/s (2·N·O·C·kk·P useful FLOPs each, CPU time):
//
//	GOMAXPROCS=1 go test ./internal/simd -run '^$' -bench ConvShiftDemo -benchtime 7x
func BenchmarkConvShiftDemo(b *testing.B) {
	restore, err := Set(AVX512)
	if err != nil {
		b.Skip(err)
	}
	defer restore()
	for _, tc := range []struct{ c, o, hw, k int }{
		{16, 16, 14, 3}, {16, 32, 7, 3}, {16, 32, 7, 1}, {32, 32, 7, 3}, {32, 64, 4, 3}, {32, 64, 4, 1}, {64, 64, 4, 3},
	} {
		const n = 64
		b.Run(fmt.Sprintf("c%d_o%d_%dx%d_k%d", tc.c, tc.o, tc.hw, tc.hw, tc.k), func(b *testing.B) {
			s := demoShift(tc.c, tc.o, tc.hw, tc.k)
			P, kk := s.P, s.KK
			rng := rand.New(rand.NewSource(1))
			x, dy, y := make([]float32, n*tc.c*P), make([]float32, n*tc.o*P), make([]float32, n*tc.o*P)
			wp, dw := make([]float32, tc.o*tc.c*kk), make([]float32, tc.o*tc.c*kk)
			fillRand(rng, x)
			fillRand(rng, dy)
			fillRand(rng, wp)
			units := ConvShiftUnits(s, n)
			calls := max(1, 1e9/(n*tc.o*tc.c*kk*P)) // about 2 GFLOP a measurement
			var fwd, wg []float64
			b.ResetTimer()
			for range b.N {
				c0 := cpuSeconds()
				for range calls {
					ConvShiftFwd(s, x, wp, nil, y, n, 0, units)
				}
				c1 := cpuSeconds()
				for range calls {
					ConvShiftWGrad(s, x, dy, dw, n, 0, tc.o)
				}
				c2 := cpuSeconds()
				fl := 2 * float64(n*tc.o*tc.c*kk*P) * float64(calls) / 1e9
				fwd, wg = append(fwd, fl/(c1-c0)), append(wg, fl/(c2-c1))
			}
			b.ReportMetric(medianOf(fwd), "fwd-GFLOP/s")
			b.ReportMetric(medianOf(wg), "wgrad-GFLOP/s")
		})
	}
}

// BenchmarkConvShiftSpanAB times the AVX-512 forward on the shapes of BenchmarkConvShiftDemo
// whose P is not a multiple of 16 with its units across images (Note [Units across images])
// and with per-image units (convShiftSpanOff), alternating in each repetition, and reports
// the medians of their GFLOP/s (CPU time) and of their ratio (14x14 runs per-image units
// both ways: a check of the benchmark's noise):
//
//	GOMAXPROCS=1 go test ./internal/simd -run '^$' -bench ConvShiftSpanAB -benchtime 9x
func BenchmarkConvShiftSpanAB(b *testing.B) {
	restore, err := Set(AVX512)
	if err != nil {
		b.Skip(err)
	}
	defer restore()
	defer convShiftSpanOff.Store(false)
	for _, tc := range []struct{ c, o, hw, k int }{
		{16, 16, 14, 3}, {16, 32, 7, 3}, {16, 32, 7, 1}, {32, 32, 7, 3},
	} {
		const n = 64
		b.Run(fmt.Sprintf("c%d_o%d_%dx%d_k%d", tc.c, tc.o, tc.hw, tc.hw, tc.k), func(b *testing.B) {
			s := demoShift(tc.c, tc.o, tc.hw, tc.k)
			P, kk := s.P, s.KK
			rng := rand.New(rand.NewSource(1))
			x, y, wp := make([]float32, n*tc.c*P), make([]float32, n*tc.o*P), make([]float32, tc.o*tc.c*kk)
			fillRand(rng, x)
			fillRand(rng, wp)
			calls := max(1, 1e9/(n*tc.o*tc.c*kk*P))
			fl := 2 * float64(n*tc.o*tc.c*kk*P) * float64(calls) / 1e9
			run := func(off bool) float64 {
				convShiftSpanOff.Store(off)
				units := ConvShiftUnits(s, n)
				c0 := cpuSeconds()
				for range calls {
					ConvShiftFwd(s, x, wp, nil, y, n, 0, units)
				}
				return fl / (cpuSeconds() - c0)
			}
			var span, img, ratio []float64
			b.ResetTimer()
			for i := range b.N {
				var a, o float64
				if i%2 == 0 {
					a, o = run(false), run(true)
				} else {
					o, a = run(true), run(false)
				}
				span, img, ratio = append(span, a), append(img, o), append(ratio, a/o)
			}
			b.ReportMetric(medianOf(span), "span-GFLOP/s")
			b.ReportMetric(medianOf(img), "image-GFLOP/s")
			b.ReportMetric(medianOf(ratio), "span/image")
		})
	}
}

// demoShift is sameShift on hw×hw maps (resnet8_s2's layers in the benchmarks).
func demoShift(c, o, hw, k int) *ConvShift { return sameShift(c, o, hw, hw, k, 1) }

// BenchmarkPhaseMergeAB times PhaseMerge at stride 2 on resnet8_s2's strided layers (batch
// 64: 3x3 with all four phases, 1x1 with one) with AVX-512's loop and with the generic copy
// (level AVX2), alternating in each repetition, and reports their median GB/s of dx written
// (CPU time) and the median ratio:
//
//	GOMAXPROCS=1 go test ./internal/simd -run '^$' -bench PhaseMergeAB -benchtime 9x
func BenchmarkPhaseMergeAB(b *testing.B) {
	if Supported(AVX512) != nil {
		b.Skip("no AVX-512")
	}
	for _, tc := range []struct {
		c, hw int
		used  uint64
	}{{16, 14, 15}, {16, 14, 1}, {32, 7, 15}, {32, 7, 1}} {
		const n = 64
		b.Run(fmt.Sprintf("c%d_%dx%d_used%04b", tc.c, tc.hw, tc.hw, tc.used), func(b *testing.B) {
			nc, oh := n*tc.c, (tc.hw+1)/2
			xp, dx := make([]float32, nc*4*oh*oh), make([]float32, nc*tc.hw*tc.hw)
			fillRand(rand.New(rand.NewSource(1)), xp)
			const calls = 200
			var fast, slow, ratio []float64
			for range b.N {
				var secs [2]float64
				for i, l := range []Level{AVX512, AVX2} {
					restore, err := Set(l)
					if err != nil {
						b.Fatal(err)
					}
					c0 := cpuSeconds()
					for range calls {
						PhaseMerge(xp, dx, nc, tc.hw, tc.hw, oh, oh, 2, tc.used)
					}
					secs[i] = cpuSeconds() - c0
					restore()
				}
				gb := float64(calls*len(dx)*4) / 1e9
				fast, slow, ratio = append(fast, gb/secs[0]), append(slow, gb/secs[1]), append(ratio, secs[1]/secs[0])
			}
			b.ReportMetric(medianOf(fast), "avx512-GB/s")
			b.ReportMetric(medianOf(slow), "generic-GB/s")
			b.ReportMetric(medianOf(ratio), "x")
		})
	}
}
