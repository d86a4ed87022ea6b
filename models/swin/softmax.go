package swin

import (
	"math"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// softmaxRows32 replaces each row of s [n, n] (scaled scores) by softmax(s + bias + mask)
// along the row; bias is [n, n], mask [n, n] or nil. Sums are in float64, as in
// softmaxRows64; the exponential is exp32 (relative error ≲ 2e-10), since math.Exp and
// math.Max were half of the attention op's own time.
func softmaxRows32(s []float32, bias []float64, mask []float32, n int) {
	if simd.SoftmaxRows32(s, bias, mask, n) {
		return
	}
	for i := range n {
		row, br := s[i*n:(i+1)*n], bias[i*n:(i+1)*n]
		mx := math.Inf(-1)
		if mask != nil {
			mr := mask[i*n : (i+1)*n]
			for j, v := range row {
				r := float32(float64(v) + br[j] + float64(mr[j]))
				row[j] = r
				mx = max(mx, float64(r))
			}
		} else {
			for j, v := range row {
				r := float32(float64(v) + br[j])
				row[j] = r
				mx = max(mx, float64(r))
			}
		}
		inv := 1 / expRow(row, mx)
		for j, v := range row {
			row[j] = float32(float64(v) * inv)
		}
	}
}

// softmaxRows64 is softmaxRows32 for float64, with math.Exp: the gradient checks run in
// float64 and measure against it.
func softmaxRows64(s []float64, bias []float64, mask []float32, n int) {
	for i := range n {
		row, br := s[i*n:(i+1)*n], bias[i*n:(i+1)*n]
		mx := math.Inf(-1)
		for j := range row {
			v := row[j] + br[j]
			if mask != nil {
				v += float64(mask[i*n+j])
			}
			row[j] = v
			mx = math.Max(mx, v)
		}
		var sum float64
		for j, v := range row {
			e := math.Exp(v - mx)
			row[j] = e
			sum += e
		}
		inv := 1 / sum
		for j := range row {
			row[j] *= inv
		}
	}
}

// expRow sets row[j] = exp(row[j] - mx) for row[j] ≤ mx and returns the float64 sum of the
// exponentials (before rounding to float32). The exponential is accurate to ≲ 2e-10
// relative down to an argument of -700 and 0 below: the argument is reduced by k·ln2 to
// |r| ≤ ln2/2, and exp(r) is its Taylor polynomial of degree 8 in Estrin's form (remainder
// ≤ 0.35⁹/9!). It is written out in the loop: as a call it was not inlined, and a call
// inside such a loop costs more than the arithmetic. NaN gives NaN.
func expRow(row []float32, mx float64) float64 {
	const (
		log2e = 1.4426950408889634
		ln2hi = 6.93147180369123816490e-01 // k·ln2hi is exact for |k| < 2^11
		ln2lo = 1.90821492927058770002e-10
		round = 0x1.8p52 // adding and subtracting it rounds to an integer
	)
	var sum float64
	for j, v := range row {
		x := max(float64(v)-mx, -700)
		k := (x*log2e + round) - round
		r := (x - k*ln2hi) - k*ln2lo
		r2 := r * r
		r4 := r2 * r2
		p := ((1 + r) + r2*(1.0/2+r*(1.0/6))) + r4*((1.0/24+r*(1.0/120))+r2*(1.0/720+r*(1.0/5040))+r4*(1.0/40320))
		e := p * math.Float64frombits(uint64(int64(k)+1023)<<52)
		if x == -700 {
			e = 0
		}
		row[j] = float32(e)
		sum += e
	}
	return sum
}
