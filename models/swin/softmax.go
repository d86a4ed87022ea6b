package swin

import "math"

// softmaxRows32 replaces each row of s [n, n] (scaled scores) by softmax(s + bias + mask)
// along the row; bias is [n, n], mask [n, n] or nil. Sums are in float64, as in
// softmaxRows64; the exponential is exp32 (relative error ≲ 2e-10), since math.Exp and
// math.Max were half of the attention op's own time.
func softmaxRows32(s []float32, bias []float64, mask []float32, n int) {
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
		var sum float64
		for j, v := range row {
			e := exp32(float64(v) - mx)
			row[j] = float32(e)
			sum += e
		}
		inv := 1 / sum
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

// exp32 is exp(x) for x ≤ 0, relative error ≲ 2e-10 down to x = -700 and 0 below: the
// argument is reduced by k·ln2 to |r| ≤ ln2/2, and exp(r) is its Taylor polynomial of
// degree 8 in Estrin's form (remainder ≤ 0.35⁹/9!). NaN gives NaN.
func exp32(x float64) float64 {
	const (
		log2e = 1.4426950408889634
		ln2hi = 6.93147180369123816490e-01 // k·ln2hi is exact for |k| < 2^11
		ln2lo = 1.90821492927058770002e-10
		round = 0x1.8p52 // adding and subtracting it rounds to an integer
	)
	if x < -700 {
		return 0
	}
	k := (x*log2e + round) - round
	r := (x - k*ln2hi) - k*ln2lo
	r2 := r * r
	r4 := r2 * r2
	p := ((1 + r) + r2*(1.0/2+r*(1.0/6))) + r4*((1.0/24+r*(1.0/120))+r2*(1.0/720+r*(1.0/5040))+r4*(1.0/40320))
	return p * math.Float64frombits(uint64(int64(k)+1023)<<52)
}
