//go:build cgo && amd64 && !purego && linux

package simd

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// TestConvShiftFwdReads checks the forward (ConvShiftFwd) where the AVX-512 kernel reads x
// with plain loads and merge-masked FMAs (the units whose reads stay inside x, with finite
// weights) and where it must not: against a float64 convolution from the definition (within
// 2e-6 relative in the max norm; NaN, +Inf and -Inf where the definition has them) and every
// level bit for bit against the others. x lies against a page that cannot be touched, at its
// start or at its end, so a plain load past either end faults; the units are split into
// calls at odd places, so that blocks of three units straddle the edges of the plain range.
// x holds -Inf and NaN where a tap reads it masked off (the padding left and right of a
// line); an Inf or NaN weight meets the padding, where the definition's w·0 is NaN.
func TestConvShiftFwdReads(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, tc := range []struct {
		n, c, o, h, w, k int
		badW             float64 // 0, or a weight of output channel 1 set to it
		xAtEnd           bool
	}{
		{3, 4, 9, 7, 7, 3, 0, true},
		{3, 4, 9, 7, 7, 3, 0, false},
		{2, 5, 8, 14, 14, 3, 0, true},
		{2, 5, 8, 14, 14, 3, 0, false},
		{7, 3, 17, 4, 4, 3, 0, true},
		{7, 3, 17, 4, 4, 3, 0, false},
		{5, 6, 5, 5, 3, 5, 0, true},
		{4, 3, 6, 7, 7, 1, 0, true},
		{3, 4, 9, 7, 7, 3, math.Inf(1), true},
		{7, 3, 17, 4, 4, 3, math.Inf(-1), false},
		{2, 5, 8, 14, 14, 3, math.NaN(), true},
	} {
		name := fmt.Sprintf("n%d_c%d_o%d_%dx%d_k%d_w%g_end%v", tc.n, tc.c, tc.o, tc.h, tc.w, tc.k, tc.badW, tc.xAtEnd)
		t.Run(name, func(t *testing.T) {
			s := sameShift(tc.c, tc.o, tc.h, tc.w, tc.k, 1)
			P, kk := s.P, s.KK
			K := tc.c * kk
			x, fx := guarded(t, tc.n*tc.c*P, tc.xAtEnd)
			defer fx()
			fillRand(rng, x)
			if tc.w > 1 && tc.h > 1 {
				// In image n/2, the last pixel of channel 0's second line and the first of
				// channel 1's: a tap one column to the right, or left, reads them masked off.
				b := tc.n / 2 * tc.c * P
				x[b+2*tc.w-1] = float32(math.Inf(-1))
				if tc.c > 1 {
					x[b+P+tc.w] = float32(math.NaN())
				}
			}
			w := make([]float32, tc.o*K)
			fillRand(rng, w)
			if tc.badW != 0 {
				w[1*K] = float32(tc.badW) // input channel 0, tap (0, 0): the padding above
			}
			wp := packWeightsT(w, tc.o, K)
			bias := make([]float32, tc.o)
			fillRand(rng, bias)
			want := convRef64(x, w, bias, tc.n, tc.c, tc.o, tc.h, tc.w, tc.k, tc.c*P, P, tc.o*P, P)
			var ys [][]float32
			var levels []Level
			for _, l := range []Level{AVX512, AVX2} {
				if Supported(l) != nil {
					continue
				}
				y, fy := guarded(t, tc.n*tc.o*P, true)
				defer fy()
				for i := range y {
					y[i] = float32(math.NaN())
				}
				at(t, l, func() {
					u := ConvShiftUnits(s, tc.n)
					cuts := []int{0, min(3, u), min(4, u), max(min(4, u), u-3), u}
					for i := 1; i < len(cuts); i++ {
						if !ConvShiftFwd(s, x, wp, bias, y, tc.n, cuts[i-1], cuts[i]) {
							t.Fatalf("%s: ConvShiftFwd did not run on units [%d, %d)", l, cuts[i-1], cuts[i])
						}
					}
				})
				if e := relMax(y, want); !(e <= 2e-6) {
					t.Errorf("%s: forward differs from the definition by %.3g (max-norm relative, bound 2e-6)", l, e)
				}
				ys, levels = append(ys, y), append(levels, l)
			}
			if len(levels) == 0 {
				t.Skip("no SIMD level runs here")
			}
			for i := 1; i < len(levels); i++ {
				for k := range ys[0] {
					if !sameBits(ys[0][k], ys[i][k]) {
						t.Errorf("forward [%d]: %g at %s, %g at %s", k, ys[0][k], levels[0], ys[i][k], levels[i])
						break
					}
				}
			}
		})
	}
}

// TestPhaseSplitMergeStride2 checks PhaseSplit and PhaseMerge at stride 2 at every level
// this CPU runs (AVX-512 splits and merges all four phases with its own loops) against their
// definitions (TestPhaseSplitMerge's), on rows of several 32-pixel chunks, odd sizes and
// phase planes wider than x's phases.
func TestPhaseSplitMergeStride2(t *testing.T) {
	for _, tc := range []struct{ nc, h, w, oh, ow int }{
		{3, 28, 28, 14, 14}, {2, 14, 14, 7, 7}, {2, 7, 7, 4, 4}, {2, 70, 66, 35, 33}, {1, 9, 8, 5, 4},
		{2, 5, 5, 4, 5}, {1, 1, 1, 1, 1}, {1, 3, 40, 2, 20}, {1, 4, 33, 2, 17}, {1, 3, 17, 2, 9},
	} {
		for _, used := range []uint64{1, 15, 0b1010, 0b0110} {
			ran := 0
			for _, l := range []Level{AVX512, AVX2} {
				if Supported(l) != nil {
					continue
				}
				ran++
				name := fmt.Sprintf("%s %+v used %04b", l, tc, used)
				P := tc.oh * tc.ow
				x, fx := guarded(t, tc.nc*tc.h*tc.w, true)
				defer fx()
				for i := range x {
					x[i] = float32(i + 1)
				}
				xp, fxp := guarded(t, tc.nc*4*P, true)
				defer fxp()
				for i := range xp {
					xp[i] = -1
				}
				dx, fdx := guarded(t, len(x), true)
				defer fdx()
				for i := range dx {
					dx[i] = -2
				}
				at(t, l, func() {
					if !PhaseSplit(x, xp, tc.nc, tc.h, tc.w, tc.oh, tc.ow, 2, used) ||
						!PhaseMerge(xp, dx, tc.nc, tc.h, tc.w, tc.oh, tc.ow, 2, used) {
						t.Fatalf("%s: PhaseSplit or PhaseMerge did not run", name)
					}
				})
				for p := 0; p < tc.nc; p++ {
					for ph := 0; ph < 4; ph++ {
						a, b := ph/2, ph%2
						for k := 0; k < P; k++ {
							i, j := k/tc.ow, k%tc.ow
							want := float32(-1)
							if used>>uint(ph)&1 == 1 {
								want = 0
								if ih, iw := 2*i+a, 2*j+b; ih < tc.h && iw < tc.w {
									want = x[(p*tc.h+ih)*tc.w+iw]
								}
							}
							if got := xp[(p*4+ph)*P+k]; got != want {
								t.Fatalf("%s: split plane %d [%d,%d] of %d = %g, want %g", name, ph, i, j, p, got, want)
							}
						}
					}
					for k := 0; k < tc.h*tc.w; k++ {
						ih, iw := k/tc.w, k%tc.w
						want := float32(0)
						if ih/2 < tc.oh && iw/2 < tc.ow && used>>uint(ih%2*2+iw%2)&1 == 1 {
							want = x[p*tc.h*tc.w+k]
						}
						if got := dx[p*tc.h*tc.w+k]; got != want {
							t.Fatalf("%s: merge [%d,%d] of %d = %g, want %g", name, ih, iw, p, got, want)
						}
					}
				}
			}
			if ran == 0 {
				t.Skip("no SIMD level runs here")
			}
		}
	}
}

// packWeightsT is ConvShiftFwd's packing of w (o×K) for the tests: its transpose, K×o.
func packWeightsT(w []float32, o, K int) []float32 {
	wp := make([]float32, K*o)
	for oi := 0; oi < o; oi++ {
		for r := 0; r < K; r++ {
			wp[r*o+oi] = w[oi*K+r]
		}
	}
	return wp
}

// convRef64 is the float64 reference of a stride-1 convolution with a k×k kernel, padding
// k/2 and a bias, of n images of c channels on h×wd maps into o channels of the same size:
// x's channel planes xc floats apart and its images xn apart, the result's planes yc apart
// and its images yn apart (what lies between planes is left 0).
func convRef64(x, w, bias []float32, n, c, o, h, wd, k, xn, xc, yn, yc int) []float64 {
	P, pad, K := h*wd, k/2, c*k*k
	want := make([]float64, (n-1)*yn+(o-1)*yc+P)
	for ni := 0; ni < n; ni++ {
		for oi := 0; oi < o; oi++ {
			for p := 0; p < P; p++ {
				v := float64(bias[oi])
				for ci := 0; ci < c; ci++ {
					for i := 0; i < k; i++ {
						for j := 0; j < k; j++ {
							ih, iw := p/wd-pad+i, p%wd-pad+j
							xv := 0.0
							if ih >= 0 && ih < h && iw >= 0 && iw < wd {
								xv = float64(x[ni*xn+ci*xc+ih*wd+iw])
							}
							v += float64(w[oi*K+(ci*k+i)*k+j]) * xv
						}
					}
				}
				want[ni*yn+oi*yc+p] = v
			}
		}
	}
	return want
}
