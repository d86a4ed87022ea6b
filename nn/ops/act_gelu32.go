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
//	Φ(x) = 0.5 + x·P(x²)                                  for a < 3,
//	t = φ(a)·m(a) = 1-Φ(a),   Φ(x) = t (x < 0) or 1-t (x > 0)   for a ≥ 3.
//
// Computing the tail keeps Φ relatively accurate for very negative x, where
// 0.5·(1+erf(x/√2)) cancels; the sign is chosen by a bit mask, since activations have random
// signs and a branch on them would mispredict half the time (the branch on a < 3 is taken
// for 99.7% of N(0, 1) activations); and in the tail the backward pass shares φ's exp
// between both terms of GELU'(x) = Φ(x) + x·φ(x).

const (
	// geluSplit: below it in |x| the forward and the backward are each one polynomial (no
	// exp, no division), for the bulk of activations, which are O(1). An 8-lane vector pays
	// for the tail (exp, a division and a mispredicted branch) when any lane is beyond the
	// split: on N(0, 1) activations one vector in 50 has a lane beyond 3, one in 3 beyond 2.
	geluSplit = 3.0
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

// geluPoly and geluDPoly are written out rather than read from a table: Go's inliner does
// not take a table-driven evaluation whole, and a call in gelu32Fwd's loop made it 2.5
// times slower (its note). The C kernels read the same coefficients from internal/simd's gelu_coef.h;
// TestSimdGELUMatchesGo holds the two within an ulp.
//
// geluPoly(u) ≈ (Φ(x)-0.5)/x at u = x² ∈ [0, 9]: Chebyshev interpolation of degree 15 in u
// (0.5 + x·P(x²) is within 1.6e-12 relative of Φ(x) for |x| ≤ 3 against math.Erfc, the
// cancellation towards x = -3 included). Estrin's scheme: Horner's chain of 15 dependent
// multiply-adds would make these loops latency-bound.
func geluPoly(u float64) float64 {
	u2 := u * u
	u4 := u2 * u2
	u8 := u4 * u4
	p01 := 0.39894228040143004 + u*-0.06649038006680015
	p23 := 0.0099735570091643178 + u*-0.0011873282124595394
	p45 := 0.00011543468196476989 + u*-9.444649762361889e-06
	p67 := 6.6596439329511334e-07 + u*-4.1224035718357565e-08
	p89 := 2.272518984736298e-09 + u*-1.1272713907955225e-10
	pAB := 5.0528826071955501e-12 + u*-2.028748971068135e-13
	pCD := 7.052033436517055e-15 + u*-1.9687353213115407e-16
	pEF := 3.8297665372266678e-18 + u*-3.7847069480513205e-20
	return ((p01 + u2*p23) + u4*(p45+u2*p67)) + u8*((p89+u2*pAB)+u4*(pCD+u2*pEF))
}

// geluDPoly(u) ≈ (Φ(x)-0.5)/x + φ(x) at u = x² ∈ [0, 9], so that GELU'(x) = 0.5 + x·D(x²):
// Chebyshev interpolation of degree 15 in u (0.5 + x·D(x²) is within 5.9e-12 of GELU'(x)
// relative to Φ(x) + |x|·φ(x) for |x| ≤ 3, against math.Erfc and math.Exp), in Estrin's form.
func geluDPoly(u float64) float64 {
	u2 := u * u
	u4 := u2 * u2
	u8 := u4 * u4
	p01 := 0.79788456080282899 + u*-0.26596152026562236
	p23 := 0.059841342041515748 + u*-0.0094986256541630155
	p45 := 0.0011543467391400277 + u*-0.00011333571151029705
	p67 := 9.3234421590961261e-06 + u*-6.5955642667378339e-07
	p89 := 4.0895929761412453e-08 + u*-2.2522875125179206e-09
	pAB := 1.1077464727698868e-10 + u*-4.8211956449980554e-12
	pCD := 1.7926353332674225e-13 + u*-5.281241401235269e-15
	pEF := 1.0712674082007008e-16 + u*-1.0937834743485665e-18
	return ((p01 + u2*p23) + u4*(p45+u2*p67)) + u8*((p89+u2*pAB)+u4*(pCD+u2*pEF))
}

// geluMills(a) ≈ (1-Φ(a))/φ(a) for a ∈ [2, 30] (used from geluSplit): a rational function of degree 4/5 fitted by
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
