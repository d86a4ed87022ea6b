//go:build cgo && amd64 && !purego && linux

package simd

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"syscall"
	"testing"
)

// The implicit convolution's kernels at every level this CPU runs, against a float64
// convolution computed from the definition: within 2e-6 relative in the max norm (float32
// sums of at most a few thousand products, accumulated in order or in 16 lanes), and the
// levels bit for bit against each other. Inputs and outputs lie against pages that cannot
// be touched (guarded), so a load or store past either end faults; the outputs start as
// sentinels, so a write the kernel should not make shows.
//
// With nf, image n/2 has +Inf and NaN in dy's output channel 0 and -Inf at the last pixel of
// x's second line (read, masked off, as the padding left of the third line's first pixel): each
// output is then NaN, +Inf or -Inf where the definition's is (dy·0 for a pixel in the
// padding is NaN), and the same bits at every level but for NaN's payload. The filter
// gradient runs as two calls, output channels [0, O/2) with the non-finite dy and [O/2, O)
// without.
func TestConvShiftKernels(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	cases := []struct {
		n, c, o, h, w, k, d int
		nf                  bool
	}{
		{2, 3, 5, 5, 5, 3, 1, false},
		{3, 16, 16, 14, 14, 3, 1, false},
		{2, 32, 32, 7, 7, 3, 1, false},
		{5, 64, 64, 4, 4, 3, 1, false},
		{1, 7, 13, 9, 6, 5, 1, false},
		{2, 4, 9, 8, 11, 3, 2, false},
		{3, 5, 3, 3, 17, 1, 1, false},
		{1, 2, 19, 1, 1, 3, 1, false},
		// Lines of a multiple of 16 pixels: the filter gradient from padded planes too.
		{3, 16, 16, 16, 16, 3, 1, false},
		{2, 5, 6, 8, 16, 3, 2, false},
		{2, 8, 4, 32, 32, 3, 1, false},
		// Over 128 images: 4x4 maps take the filter gradient's copy of dy in groups.
		{129, 3, 9, 2, 2, 3, 1, false},
		{128, 3, 9, 3, 3, 3, 1, false},
		{130, 2, 8, 4, 4, 1, 1, false},
		{200, 5, 9, 4, 4, 3, 1, false},
		{130, 3, 6, 7, 7, 3, 1, false},
		// The filter gradient in groups of units (gp5s_wgrad_plan): of whole images, of
		// parts of images (40x40, batch 1 and 2), with the rows in spans (C·kk = 180), at
		// dilation 2, from padded planes.
		{64, 4, 8, 7, 7, 3, 1, false},
		{2, 3, 6, 40, 40, 3, 1, false},
		{1, 3, 5, 40, 40, 3, 1, false},
		{40, 20, 6, 9, 9, 3, 1, false},
		{40, 3, 5, 8, 11, 3, 2, false},
		{4, 4, 8, 32, 32, 3, 1, false},
		{1, 16, 16, 14, 14, 3, 1, false},
		// 1x1 without padding: the filter gradient's plain loads (mode 3), with and
		// without a partial last chunk.
		{2, 4, 6, 8, 8, 1, 1, false},
		{70, 5, 6, 7, 7, 1, 1, false},
		// Inf and NaN.
		{64, 4, 8, 7, 7, 3, 1, true},
		{3, 3, 6, 40, 40, 3, 1, true},
		{5, 64, 64, 4, 4, 3, 1, true},
		{3, 16, 16, 16, 16, 3, 1, true},
		{1, 7, 13, 9, 6, 5, 1, true},
		{4, 5, 6, 7, 7, 1, 1, true},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("n%d_c%d_o%d_%dx%d_k%d_d%d", tc.n, tc.c, tc.o, tc.h, tc.w, tc.k, tc.d)
		if tc.nf {
			name += "_nonfinite"
		}
		t.Run(name, func(t *testing.T) {
			s, pad := sameShift(tc.c, tc.o, tc.h, tc.w, tc.k, tc.d), tc.d*(tc.k-1)/2
			P, kk := s.P, s.KK
			K := tc.c * kk
			nch := (P + 15) / 16
			x, fx := guarded(t, tc.n*tc.c*P, true)
			defer fx()
			dy, fdy := guarded(t, tc.n*tc.o*P, false)
			defer fdy()
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			for i := range dy {
				dy[i] = float32(rng.NormFloat64())
			}
			if tc.nf {
				// In image n/2: in the middle of the batch, where the kernels may read x
				// with plain loads.
				m := tc.n / 2
				dy[m*tc.o*P] = float32(math.Inf(1))
				dy[m*tc.o*P+min(5, P-1)] = float32(math.NaN())
				x[m*tc.c*P+2*tc.w-1] = float32(math.Inf(-1))
			}
			w := make([]float32, tc.o*K) // O×K, as nn/ops's weights
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			wp := packWeightsT(w, tc.o, K)
			bias := make([]float32, tc.o)
			for i := range bias {
				bias[i] = float32(rng.NormFloat64())
			}
			// The definition, in float64.
			in := func(n, c, oh, ow, i, j int) float64 {
				ih, iw := oh-pad+i*tc.d, ow-pad+j*tc.d
				if ih < 0 || ih >= tc.h || iw < 0 || iw >= tc.w {
					return 0
				}
				return float64(x[(n*tc.c+c)*P+ih*tc.w+iw])
			}
			wantY := make([]float64, tc.n*tc.o*P)
			wantDW := make([]float64, tc.o*K)
			for n := 0; n < tc.n; n++ {
				for o := 0; o < tc.o; o++ {
					for k := 0; k < P; k++ {
						s := float64(bias[o])
						for c := 0; c < tc.c; c++ {
							for i := 0; i < tc.k; i++ {
								for j := 0; j < tc.k; j++ {
									v := in(n, c, k/tc.w, k%tc.w, i, j)
									r := (c*tc.k+i)*tc.k + j
									s += float64(w[o*K+r]) * v
									wantDW[o*K+r] += float64(dy[(n*tc.o+o)*P+k]) * v
								}
							}
						}
						wantY[(n*tc.o+o)*P+k] = s
					}
				}
			}
			var ys, dws [][]float32
			var levels []Level
			for _, l := range []Level{AVX512, AVX2} {
				if Supported(l) != nil {
					continue
				}
				y, fy := guarded(t, tc.n*tc.o*P, true)
				defer fy()
				dw, fdw := guarded(t, tc.o*K, false)
				defer fdw()
				for i := range y {
					y[i] = float32(math.NaN())
				}
				for i := range dw {
					dw[i] = float32(math.NaN())
				}
				at(t, l, func() {
					// Two calls over a split of the units and of the output channels, as
					// nn/ops's workers make them.
					u := ConvShiftUnits(s, tc.n)
					if !ConvShiftFwd(s, x, wp, bias, y, tc.n, 0, u/2) ||
						!ConvShiftFwd(s, x, wp, bias, y, tc.n, u/2, u) {
						t.Fatalf("%s: ConvShiftFwd did not run", l)
					}
					if !ConvShiftWGrad(s, x, dy, dw, tc.n, 0, tc.o/2) ||
						!ConvShiftWGrad(s, x, dy, dw, tc.n, tc.o/2, tc.o) {
						t.Fatalf("%s: ConvShiftWGrad did not run", l)
					}
				})
				// The filter gradient from padded planes, where it runs: the same bits as from x.
				pad := testPad(tc.h, tc.w, tc.k, tc.d, pad)
				xp := make([]float32, tc.n*tc.c*pad.Size())
				dwp, fdwp := guarded(t, tc.o*K, false)
				defer fdwp()
				yp, fyp := guarded(t, tc.n*tc.o*P, true)
				defer fyp()
				var padOK bool
				at(t, l, func() {
					u := tc.n * nch
					if padOK = ConvShiftPadOK(s, pad); padOK && (!PadPlanes(pad, x, xp, tc.n*tc.c) ||
						!ConvShiftWGradPad(s, pad, xp, dy, dwp, tc.n, 0, tc.o/2) ||
						!ConvShiftWGradPad(s, pad, xp, dy, dwp, tc.n, tc.o/2, tc.o) ||
						!ConvShiftFwdPad(s, pad, xp, wp, bias, yp, tc.n, 0, u/2) ||
						!ConvShiftFwdPad(s, pad, xp, wp, bias, yp, tc.n, u/2, u)) {
						t.Fatalf("%s: ConvShiftWGradPad or ConvShiftFwdPad did not run", l)
					}
				})
				for k := range y {
					if padOK && !sameBits(y[k], yp[k]) {
						t.Errorf("%s: forward [%d] from padded planes %g, from x %g", l, k, yp[k], y[k])
						break
					}
				}
				if want := l == AVX512 && tc.w%16 == 0; padOK != want {
					t.Errorf("%s: ConvShiftPadOK = %v for lines of %d pixels", l, padOK, tc.w)
				}
				for k := range dw {
					if padOK && !sameBits(dw[k], dwp[k]) {
						t.Errorf("%s: filter gradient [%d] from padded planes %g, from x %g", l, k, dwp[k], dw[k])
						break
					}
				}
				if e := relMax(y, wantY); !(e <= 2e-6) {
					t.Errorf("%s: forward differs from the definition by %.3g (max-norm relative, bound 2e-6)", l, e)
				}
				if e := relMax(dw, wantDW); !(e <= 2e-6) {
					t.Errorf("%s: filter gradient differs from the definition by %.3g (max-norm relative, bound 2e-6)", l, e)
				}
				ys, dws, levels = append(ys, y), append(dws, dw), append(levels, l)
			}
			if len(levels) == 0 {
				t.Skip("no SIMD level runs here")
			}
			for i := 1; i < len(levels); i++ {
				for what, pair := range map[string][2][]float32{"forward": {ys[0], ys[i]}, "filter gradient": {dws[0], dws[i]}} {
					for k := range pair[0] {
						if !sameBits(pair[0][k], pair[1][k]) {
							t.Errorf("%s [%d]: %g at %s, %g at %s", what, k, pair[0][k], levels[0], pair[1][k], levels[i])
							break
						}
					}
				}
			}
		})
	}
}

// testPad is the ConvPad of a k×k convolution of an h×w plane at dilation d with padding
// pad, stride 1.
func testPad(h, w, k, d, pad int) *ConvPad {
	p := &ConvPad{OH: h, OW: w, PH: pad, PW: pad}
	wp := w + 2*pad
	for i := 0; i < k; i++ {
		for j := 0; j < k; j++ {
			p.Off = append(p.Off, int32((i*d-pad+pad)*wp+j*d-pad+pad))
		}
	}
	return p
}

// relMax is max|got - want| / max|want| over the finite wants; NaN when got has a NaN
// where want is finite, or where want is NaN, +Inf or -Inf and got is not the same.
func relMax(got []float32, want []float64) float64 {
	var e, m float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(w) || math.IsInf(w, 0) {
			if !(math.IsNaN(w) && math.IsNaN(g) || g == w) {
				return math.NaN()
			}
			continue
		}
		d := math.Abs(g - w)
		if math.IsNaN(d) {
			return math.NaN()
		}
		e, m = max(e, d), max(m, math.Abs(w))
	}
	return e / m
}

// sameBits reports whether a and b are the same bits, or both NaN: a NaN's payload, from
// NaN operands, depends on the order of an instruction's operands, which the levels and
// ways of reading x do not fix.
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// TestPhaseSplitMerge checks PhaseSplit against its definition (plane a·s + b holds
// x[s·i + a, s·j + b], 0 past x's edge; planes not in used untouched) and PhaseMerge against
// its inverse (every pixel of a used phase back in place, the rest 0), on sizes that divide
// by the stride and sizes that do not.
func TestPhaseSplitMerge(t *testing.T) {
	if Current() == Off {
		t.Skip("level off: the kernels report false")
	}
	for _, tc := range []struct{ nc, h, w, oh, ow, s int }{
		{3, 14, 14, 7, 7, 2}, {2, 7, 7, 4, 4, 2}, {2, 9, 8, 5, 4, 2}, {1, 10, 12, 4, 4, 3}, {2, 5, 5, 5, 5, 1},
	} {
		for _, used := range []uint64{1, 1<<uint(tc.s*tc.s) - 1, 0b1010} {
			x := make([]float32, tc.nc*tc.h*tc.w)
			for i := range x {
				x[i] = float32(i + 1)
			}
			ss, P := tc.s*tc.s, tc.oh*tc.ow
			xp := make([]float32, tc.nc*ss*P)
			for i := range xp {
				xp[i] = -1
			}
			if !PhaseSplit(x, xp, tc.nc, tc.h, tc.w, tc.oh, tc.ow, tc.s, used) {
				t.Fatal("PhaseSplit did not run")
			}
			dx := make([]float32, len(x))
			for i := range dx {
				dx[i] = -2
			}
			if !PhaseMerge(xp, dx, tc.nc, tc.h, tc.w, tc.oh, tc.ow, tc.s, used) {
				t.Fatal("PhaseMerge did not run")
			}
			for p := 0; p < tc.nc; p++ {
				for a := 0; a < tc.s; a++ {
					for b := 0; b < tc.s; b++ {
						ph := a*tc.s + b
						for i := 0; i < tc.oh; i++ {
							for j := 0; j < tc.ow; j++ {
								got := xp[(p*ss+ph)*P+i*tc.ow+j]
								want := float32(-1)
								if used>>uint(ph)&1 == 1 {
									want = 0
									if ih, iw := tc.s*i+a, tc.s*j+b; ih < tc.h && iw < tc.w {
										want = x[(p*tc.h+ih)*tc.w+iw]
									}
								}
								if got != want {
									t.Fatalf("%+v used %b: split plane %d [%d,%d] of %d = %g, want %g", tc, used, ph, i, j, p, got, want)
								}
							}
						}
					}
				}
				for ih := 0; ih < tc.h; ih++ {
					for iw := 0; iw < tc.w; iw++ {
						i, a, j, b := ih/tc.s, ih%tc.s, iw/tc.s, iw%tc.s
						want := float32(0)
						if i < tc.oh && j < tc.ow && used>>uint(a*tc.s+b)&1 == 1 {
							want = x[(p*tc.h+ih)*tc.w+iw]
						}
						if got := dx[(p*tc.h+ih)*tc.w+iw]; got != want {
							t.Fatalf("%+v used %b: merge [%d,%d] of %d = %g, want %g", tc, used, ih, iw, p, got, want)
						}
					}
				}
			}
		}
	}
}

// BenchmarkConvShiftWGradPadAB times the AVX-512 filter gradient reading x with masked
// loads (ConvShiftWGrad) and from padded planes (PadPlanes, then ConvShiftWGradPad),
// alternating the two in one process, on resnet18's 64-channel 16x16 layer at batch 16 and
// a 32x32 one, and reports the medians of the CPU time per call (ms, the padding included)
// and their ratio:
//
//	GOMAXPROCS=1 go test ./internal/simd -run '^$' -bench ConvShiftWGradPadAB -benchtime 7x
func BenchmarkConvShiftWGradPadAB(b *testing.B) {
	restore, err := Set(AVX512)
	if err != nil {
		b.Skip(err)
	}
	defer restore()
	for _, tc := range []struct{ n, c, o, hw int }{{16, 64, 64, 16}, {16, 32, 32, 32}} {
		b.Run(fmt.Sprintf("n%d_c%d_o%d_%dx%d", tc.n, tc.c, tc.o, tc.hw, tc.hw), func(b *testing.B) {
			s := sameShift(tc.c, tc.o, tc.hw, tc.hw, 3, 1)
			P := s.P
			pad := testPad(tc.hw, tc.hw, 3, 1, 1)
			rng := rand.New(rand.NewSource(1))
			x, dy := make([]float32, tc.n*tc.c*P), make([]float32, tc.n*tc.o*P)
			fillRand(rng, x)
			fillRand(rng, dy)
			xp := make([]float32, tc.n*tc.c*pad.Size())
			dw := make([]float32, tc.o*tc.c*9)
			const calls = 10
			var masked, padded []float64
			b.ResetTimer()
			for range b.N {
				c0 := cpuSeconds()
				for range calls {
					ConvShiftWGrad(s, x, dy, dw, tc.n, 0, tc.o)
				}
				c1 := cpuSeconds()
				for range calls {
					if !PadPlanes(pad, x, xp, tc.n*tc.c) || !ConvShiftWGradPad(s, pad, xp, dy, dw, tc.n, 0, tc.o) {
						b.Fatal("ConvShiftWGradPad did not run")
					}
				}
				c2 := cpuSeconds()
				masked, padded = append(masked, (c1-c0)/calls*1e3), append(padded, (c2-c1)/calls*1e3)
			}
			m, p := medianOf(masked), medianOf(padded)
			b.ReportMetric(m, "masked-cpu-ms/call")
			b.ReportMetric(p, "padded-cpu-ms/call")
			b.ReportMetric(m/p, "masked/padded")
			b.ReportMetric(2*float64(tc.n*tc.o*tc.c*9*P)/p/1e6, "padded-GFLOP/s")
		})
	}
}

// cpuSeconds is the user+system CPU time of the process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// medianOf is the median of v (the upper one of an even count).
func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// sameShift is the implicit convolution of c to o channels with a k×k kernel dilated by d, at
// stride 1 with padding d·(k-1)/2 on h×w maps (the output the input's size), over dense
// planes: the ConvShift of the forward and filter-gradient tests and benchmarks.
func sameShift(c, o, h, w, k, d int) *ConvShift {
	pad := d * (k - 1) / 2
	g := &ConvGeom{C: c, H: h, W: w, KH: k, KW: k, SH: 1, SW: 1, PH: pad, PW: pad, DH: d, DW: d, OH: h, OW: w}
	shift, mask := ShiftTables(g)
	P := h * w
	return &ConvShift{C: c, O: o, KK: k * k, P: P, XC: P, XN: c * P, YC: P, YN: o * P, Off: shift, Mask: mask}
}
