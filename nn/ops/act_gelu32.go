package ops

import "math"

// The float32 GELU kernels. math.Erf and math.Exp are float64-exact, branchy and not inlined,
// and made GELU cost as much as all of Swin's Linear GEMMs. Float32 needs far less: these
// kernels evaluate Φ(x) in float64 arithmetic (as fast as float32 in scalar Go) from fitted
// approximations with relative error ≲ 1e-9, so the float32 results are within about one
// rounding of the exact ones (TestGELU32MatchesFloat64 states the bounds). Float64 keeps the
// exact form, since the gradient checks measure against it.
//
// With a = |x|, φ the standard normal density and m(a) = (1-Φ(a))/φ(a) Mills' ratio:
//
//	Φ(x) = 0.5 + x·P(x²)                                  for a < 2,
//	t = φ(a)·m(a) = 1-Φ(a),   Φ(x) = t (x < 0) or 1-t (x > 0)   for a ≥ 2.
//
// Computing the tail keeps Φ relatively accurate for very negative x, where
// 0.5·(1+erf(x/√2)) cancels; the sign is chosen by a bit mask, since activations have random
// signs and a branch on them would mispredict half the time (the branch on a < 2 is mostly
// taken); and in the tail the backward pass shares φ's exp between both terms of
// GELU'(x) = Φ(x) + x·φ(x).

const (
	// geluSplit: below it in |x| the forward and the backward are each one polynomial (no
	// exp, no division), for the bulk of activations, which are O(1).
	geluSplit = 2.0
	// geluClamp bounds |x| in the tail: beyond it φ(x) underflows float32 by hundreds of
	// orders of magnitude, and the rational function's powers would overflow.
	geluClamp = 30.0
)

// gelu32FwdFast is gelu32Fwd, in a C kernel where the CPU runs one (simd.go).
func gelu32FwdFast(x, y []float32) {
	if simdOK() {
		simdGELUFwd(x, y)
		return
	}
	gelu32Fwd(x, y)
}

// gelu32BwdFast is gelu32Bwd, in a C kernel where the CPU runs one (simd.go).
func gelu32BwdFast(x, dy, dx []float32) {
	if simdOK() {
		simdGELUBwd(x, dy, dx)
		return
	}
	gelu32Bwd(x, dy, dx)
}

// gelu32Fwd sets y[i] = x[i]·Φ(x[i]).
func gelu32Fwd(x, y []float32) {
	y = y[:len(x)]
	for i, xv := range x {
		v := float64(xv)
		var p float64
		if math.Abs(v) < geluSplit {
			p = 0.5 + v*geluPoly(v*v)
		} else {
			// Inline, not a helper: a call in the loop, even on this rare path, made the
			// loop 2.5 times slower.
			a := min(math.Abs(v), geluClamp) // NaN stays NaN
			t := expNegHalfSq(a) * invSqrt2Pi * geluMills(a)
			p = selectNeg(v, t, 1-t)
		}
		y[i] = float32(v * p)
	}
}

// gelu32Bwd sets dx[i] = dy[i]·(Φ(x[i]) + x[i]·φ(x[i])). Below geluSplit, GELU' is
// 0.5 + x·D(x²) with D one polynomial (erf's series and the density's exp together), so the
// common case needs no exp either; in the tail both terms share φ's exp.
func gelu32Bwd(x, dy, dx []float32) {
	dy, dx = dy[:len(x)], dx[:len(x)]
	for i, xv := range x {
		v := float64(xv)
		var d float64
		if math.Abs(v) < geluSplit {
			d = 0.5 + v*geluDPoly(v*v)
		} else {
			a := min(math.Abs(v), geluClamp)
			pdf := expNegHalfSq(a) * invSqrt2Pi
			t := pdf * geluMills(a)
			// x·φ(x) is 0 in float32 well before the clamp, so the clamped x serves.
			d = selectNeg(v, t, 1-t) + math.Copysign(a, v)*pdf
		}
		dx[i] = float32(float64(dy[i]) * d)
	}
}

// selectNeg returns neg when v's sign bit is set (including -0) and pos otherwise, without
// a branch.
func selectNeg(v, neg, pos float64) float64 {
	m := uint64(int64(math.Float64bits(v)) >> 63)
	return math.Float64frombits(math.Float64bits(neg)&m | math.Float64bits(pos)&^m)
}

// geluPoly(u) ≈ (Φ(x)-0.5)/x at u = x² ∈ [0, 4]: a least-squares fit at Chebyshev nodes
// (relative error 1.9e-11 against mpmath; Φ(x) at x = -2 magnifies it 22 times). Estrin's
// scheme: Horner's chain of 9 dependent multiply-adds made these loops latency-bound.
func geluPoly(u float64) float64 {
	u2 := u * u
	u4 := u2 * u2
	p01 := 0.3989422804013786 + u*-0.06649037987713213
	p23 := 0.00997355525382231 + u*-0.0011873223202541689
	p45 := 0.00011542480041751897 + u*-9.435153868314686e-06
	p67 := 6.603772544188632e-07 + u*-3.9158593879525236e-08
	p89 := 1.7957230044053015e-09 + u*-4.672666658935073e-11
	return (p01 + u2*p23) + u4*((p45+u2*p67)+u4*p89)
}

// geluDPoly(u) ≈ (Φ(x)-0.5)/x + φ(x) at u = x² ∈ [0, 4], so that GELU'(x) = 0.5 + x·D(x²):
// a least-squares fit at Chebyshev nodes (relative error 2.0e-10 against mpmath), in
// Estrin's form.
func geluDPoly(u float64) float64 {
	u2 := u * u
	u4 := u2 * u2
	p01 := 0.7978845607431796 + u*-0.26596151545700153
	p23 := 0.059841300018136034 + u*-0.009498489502811883
	p45 := 0.001154124579625546 + u*-0.0001131268168009257
	p67 := 9.202592375111175e-06 + u*-6.154134653083462e-07
	p89 := 3.076539733247762e-08 + u*-8.439169063758657e-10
	return (p01 + u2*p23) + u4*((p45+u2*p67)+u4*p89)
}

// geluMills(a) ≈ (1-Φ(a))/φ(a) for a ∈ [2, 30]: a rational function of degree 4/5 fitted by
// iterated weighted least squares (relative error 1.5e-10 against mpmath). Every coefficient
// is positive, so nothing cancels and the denominator is ≥ 1.
func geluMills(a float64) float64 {
	p := 1.2542274946584864 + a*(1.311793834303858+a*(0.6470467359482944+
		a*(0.1721106885180427+a*0.02515635315459589)))
	q := 1 + a*(1.847614733022324+a*(1.4841329201743+a*(0.6721933477294133+
		a*(0.1721109201404783+a*0.02515635084346288))))
	return p / q
}

// expNegHalfSq returns exp(-a²/2) for 0 ≤ a ≤ geluClamp with relative error ≲ 3e-10. For a
// float32 a, a² is exact in float64, so the argument carries no rounding.
func expNegHalfSq(a float64) float64 {
	const (
		log2e = 1.4426950408889634
		ln2hi = 6.93147180369123816490e-01 // ln 2's high bits: k·ln2hi is exact for |k| < 2^11
		ln2lo = 1.90821492927058770002e-10
		round = 0x1.8p52 // adding and subtracting it rounds to an integer
	)
	s := -0.5 * a * a
	k := (s*log2e + round) - round
	r := (s - k*ln2hi) - k*ln2lo // |r| ≤ ln2/2
	e := expPoly(r)
	return e * math.Float64frombits(uint64(int64(k)+1023)<<52)
}

// expPoly is exp(r) for |r| ≤ ln2/2 by its Taylor polynomial of degree 8 (the remainder is
// below 0.35⁹/9! ≈ 2e-10 relative), in Estrin's scheme.
func expPoly(r float64) float64 {
	r2 := r * r
	r4 := r2 * r2
	return ((1 + r) + r2*(1.0/2+r*(1.0/6))) + r4*((1.0/24+r*(1.0/120))+r2*(1.0/720+r*(1.0/5040))+r4*(1.0/40320))
}
