//go:build cgo && amd64 && !purego && linux

package simd

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// TestConvShiftFwdSpan checks the forward's units across images (Note [Units across
// images], taken at AVX-512 where P is not a multiple of 16) against the per-image units
// at AVX-512 (convShiftSpanOff) and AVX2 bit for bit, and all against a float64
// convolution from the definition (within 2e-6 relative in the max norm, as
// TestConvShiftKernels bounds it), on odd P (9, 25, 49, 196), batches of 1 to 64 and
// splits of the units into calls that cut inside images and inside spanning units, as
// nn/ops's workers may. x and y lie against pages that cannot be touched; with strided,
// their planes lie apart (as phase planes and the data gradient's outputs do) with NaN
// between them in x, read by plain loads and masked off, and a sentinel between them in y
// that must stay as it is. A NaN or Inf weight makes the padding's w·0 NaN, as the
// definition has it.
func TestConvShiftFwdSpan(t *testing.T) {
	if Supported(AVX512) != nil {
		t.Skip("no AVX-512 here")
	}
	rng := rand.New(rand.NewSource(11))
	const sentinel = 12345
	for _, tc := range []struct {
		n, c, o, h, w, k int
		strided, xAtEnd  bool
		badW             float64
	}{
		{1, 3, 5, 7, 7, 3, false, true, 0},
		{2, 4, 9, 7, 7, 3, false, false, 0},
		{3, 5, 17, 7, 7, 3, true, true, 0},
		{64, 4, 8, 7, 7, 3, false, true, 0},
		{64, 3, 16, 7, 7, 1, true, false, 0},
		{3, 4, 9, 7, 7, 1, false, true, 0},
		{1, 3, 6, 5, 5, 3, false, true, 0},
		{2, 3, 8, 5, 5, 3, true, false, 0},
		{3, 2, 7, 5, 5, 3, false, true, 0},
		{64, 3, 9, 5, 5, 3, false, false, 0},
		{1, 2, 5, 3, 3, 3, false, true, 0},
		{3, 4, 9, 3, 3, 3, true, true, 0},
		{64, 2, 8, 3, 3, 3, false, false, 0},
		{1, 3, 8, 14, 14, 3, false, true, 0},
		{2, 4, 9, 14, 14, 3, true, false, 0},
		{3, 3, 10, 14, 14, 3, false, true, 0},
		{64, 2, 8, 14, 14, 3, false, false, 0},
		{2, 3, 6, 6, 9, 5, false, true, 0},
		{3, 4, 9, 7, 7, 3, false, true, math.NaN()},
		{64, 3, 8, 7, 7, 3, true, false, math.Inf(1)},
	} {
		name := fmt.Sprintf("n%d_c%d_o%d_%dx%d_k%d_strided%v_end%v_w%g", tc.n, tc.c, tc.o, tc.h, tc.w, tc.k, tc.strided, tc.xAtEnd, tc.badW)
		t.Run(name, func(t *testing.T) {
			s := sameShift(tc.c, tc.o, tc.h, tc.w, tc.k, 1)
			P, kk := s.P, s.KK
			K := tc.c * kk
			if tc.strided { // planes and images spaced apart, as in a larger tensor
				s.XC, s.YC = P+7, P+3
				s.XN, s.YN = tc.c*s.XC+5, tc.o*s.YC+2
			}
			xc, yc, xn, yn := s.XC, s.YC, s.XN, s.YN
			x, fx := guarded(t, (tc.n-1)*xn+(tc.c-1)*xc+P, tc.xAtEnd)
			defer fx()
			inX := func(i int) bool { return i%xn < tc.c*xc && i%xn%xc < P }
			for i := range x {
				if inX(i) {
					x[i] = float32(rng.NormFloat64())
				} else {
					x[i] = float32(math.NaN())
				}
			}
			if tc.w > 1 && tc.h > 1 {
				// The last pixel of an image's second line: a tap one column to the right
				// reads it masked off, as the padding left of the third line.
				x[tc.n/2*xn+2*tc.w-1] = float32(math.Inf(-1))
			}
			w := make([]float32, tc.o*K)
			fillRand(rng, w)
			if tc.badW != 0 || math.IsNaN(tc.badW) {
				w[1*K] = float32(tc.badW) // output channel 1, input channel 0, tap (0, 0)
			}
			wp := packWeightsT(w, tc.o, K)
			bias := make([]float32, tc.o)
			fillRand(rng, bias)
			want := convRef64(x, w, bias, tc.n, tc.c, tc.o, tc.h, tc.w, tc.k, xn, xc, yn, yc)
			ny := len(want)
			inY := func(i int) bool { return i%yn < tc.o*yc && i%yn%yc < P }
			type way struct {
				name  string
				l     Level
				span  bool
				split func(u int) []int // the cuts of [0, u) into calls
			}
			ways := []way{
				{"avx512 per-image units", AVX512, false, func(u int) []int { return []int{0, u} }},
				{"avx512 spanning, one call", AVX512, true, func(u int) []int { return []int{0, u} }},
				{"avx512 spanning, unit by unit", AVX512, true, func(u int) []int {
					c := []int{}
					for i := 0; i <= u; i++ {
						c = append(c, i)
					}
					return c
				}},
				{"avx512 spanning, odd cuts", AVX512, true, func(u int) []int {
					c := []int{0}
					for _, v := range []int{1, 3, u / 3, u/2 + 1, u - 4, u - 1} {
						if v > c[len(c)-1] && v < u {
							c = append(c, v)
						}
					}
					return append(c, u)
				}},
			}
			if Supported(AVX2) == nil {
				ways = append(ways, way{"avx2", AVX2, false, func(u int) []int { return []int{0, u} }})
			}
			var ys [][]float32
			for _, wy := range ways {
				y, fy := guarded(t, ny, true)
				defer fy()
				for i := range y {
					y[i] = sentinel
				}
				at(t, wy.l, func() {
					convShiftSpanOff.Store(!wy.span)
					defer convShiftSpanOff.Store(false)
					u := ConvShiftUnits(s, tc.n)
					spans := wy.l == AVX512 && wy.span && convShiftSpans(s)
					if wy.l == AVX512 && wy.span && (P == 49 || P == 25) && !spans {
						t.Fatalf("%s: units do not span images on %dx%d maps", wy.name, tc.h, tc.w)
					}
					if want := tc.n * ((P + 15) / 16); spans {
						want = (tc.n*P + 15) / 16
						if u != want {
							t.Fatalf("%s: ConvShiftUnits = %d, want %d", wy.name, u, want)
						}
					} else if u != want {
						t.Fatalf("%s: ConvShiftUnits = %d, want %d", wy.name, u, want)
					}
					cuts := wy.split(u)
					for i := 1; i < len(cuts); i++ {
						if !ConvShiftFwd(s, x, wp, bias, y, tc.n, cuts[i-1], cuts[i]) {
							t.Fatalf("%s: ConvShiftFwd did not run on units [%d, %d)", wy.name, cuts[i-1], cuts[i])
						}
					}
					if ConvShiftFwd(s, x, wp, bias, y, tc.n, 0, u+1) {
						t.Errorf("%s: ConvShiftFwd ran on units [0, %d) of %d", wy.name, u+1, u)
					}
				})
				for i := range y {
					if !inY(i) && y[i] != sentinel {
						t.Fatalf("%s: y[%d], between planes, written: %g", wy.name, i, y[i])
					}
					if !inY(i) {
						y[i] = 0
					}
				}
				if e := relMax(y, want); !(e <= 2e-6) {
					t.Errorf("%s: forward differs from the definition by %.3g (max-norm relative, bound 2e-6)", wy.name, e)
				}
				ys = append(ys, y)
			}
			for i := 1; i < len(ways); i++ {
				for k := range ys[0] {
					if !sameBits(ys[0][k], ys[i][k]) {
						t.Errorf("forward [%d]: %g by %s, %g by %s", k, ys[0][k], ways[0].name, ys[i][k], ways[i].name)
						break
					}
				}
			}
		})
	}
}
