package amp

import (
	"fmt"
	"math"
)

// Format is an emulated 16-bit floating-point format.
type Format int

const (
	// BF16 is bfloat16: float32's 8-bit exponent with an 8-bit significand (7 stored bits).
	// It is PyTorch's CPU autocast default.
	BF16 Format = iota
	// FP16 is IEEE 754 binary16: 5-bit exponent, 11-bit significand, largest finite value
	// 65504, subnormals down to 2^-24. PyTorch's CUDA autocast default.
	FP16
)

// String returns "bf16" or "fp16".
func (f Format) String() string {
	switch f {
	case BF16:
		return "bf16"
	case FP16:
		return "fp16"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

func (f Format) valid() error {
	if f != BF16 && f != FP16 {
		return fmt.Errorf("amp: unknown format %d (want BF16 or FP16)", int(f))
	}
	return nil
}

// MaxFinite is the largest finite value of the format (65504 for FP16).
func (f Format) MaxFinite() float64 {
	if f == FP16 {
		return 65504
	}
	return 0x1.fep127
}

// quietNaN is the float32 NaN the rounding returns for every NaN input. Bit patterns of NaNs
// are not portable (torch's vectorised bf16 path returns 0xffff0000, its scalar path
// 0x7fc00000), so only NaN-ness is part of the contract.
const quietNaN = 0x7fc00000

// Round32 rounds v to the nearest value of format f (round-to-nearest-even, subnormals,
// overflow to ±inf, NaN stays NaN) and returns it as a float32, which holds it exactly: the
// value torch's v.to(torch.bfloat16).float() or v.half().float() gives.
func Round32(f Format, v float32) float32 {
	if f == FP16 {
		return roundFP16(v)
	}
	return roundBF16(v)
}

// Round64 rounds v to format f directly from float64 (one rounding, never through float32;
// torch converts doubles through float, which can round twice). It is what the rounding op
// does on float64 graphs (gradient checks).
func Round64(f Format, v float64) float64 {
	// p: significand bits including the implicit one; emin: exponent of the smallest normal.
	p, emin := 8, -126
	if f == FP16 {
		p, emin = 11, -14
	}
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	_, e := math.Frexp(v) // |v| = m·2^e with m in [0.5, 1): the leading bit is 2^(e-1)
	e--
	if e < emin {
		e = emin // subnormal: the grid spacing stays at the smallest normal's
	}
	ulp := math.Ldexp(1, e-p+1)
	q := math.RoundToEven(v/ulp) * ulp // exact: division by a power of two
	if math.Abs(q) > f.MaxFinite() {
		return math.Copysign(math.Inf(1), v)
	}
	if q == 0 {
		return math.Copysign(0, v)
	}
	return q
}

// RoundSlice32 rounds every element of src into dst (which may be src) and returns the number
// of finite inputs that became ±inf (overflow).
func RoundSlice32(f Format, dst, src []float32) (overflow int) {
	dst = dst[:len(src)]
	if f == FP16 {
		for i, v := range src {
			r := roundFP16(v)
			overflow += becameInf(v, r)
			dst[i] = r
		}
		return overflow
	}
	for i, v := range src {
		r := roundBF16(v)
		overflow += becameInf(v, r)
		dst[i] = r
	}
	return overflow
}

// becameInf is 1 when r is ±inf and v finite, else 0, without branches.
func becameInf(v, r float32) int {
	rb, vb := math.Float32bits(r)&0x7fffffff, math.Float32bits(v)&0x7fffffff
	return int(b2u(rb == 0x7f800000) &^ b2u(vb >= 0x7f800000))
}

func b2u(b bool) uint {
	if b {
		return 1
	}
	return 0
}

// roundBF16 keeps the high 16 bits of the float32, rounding to nearest even on the low 16:
// adding 0x7fff plus the kept lowest bit carries exactly at and above the halfway point
// (ties to even), and a carry out of the significand bumps the exponent, up to +inf.
func roundBF16(v float32) float32 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 {
		return math.Float32frombits(quietNaN)
	}
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b & 0xffff0000)
}

// fp16 limits, in float32 bits.
const (
	fp16Overflow  = 0x477ff000 // 65520 = 65504 + ulp/2: ties round to the odd-less 2^16, i.e. inf
	fp16MinNormal = 0x38800000 // 2^-14
)

// roundFP16 rounds to binary16. Normal range: keep 10 of float32's 23 stored bits with the
// same carry trick as bf16. Subnormal range (|v| < 2^-14): the grid is 2^-24, so add and
// subtract 0.5 (2^-1 has a 2^-24 ulp) in float32, whose own round-to-nearest-even does the
// rounding exactly.
func roundFP16(v float32) float32 {
	b := math.Float32bits(v)
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return math.Float32frombits(quietNaN | b&0x80000000)
	case a >= fp16Overflow:
		return math.Float32frombits(0x7f800000 | b&0x80000000)
	case a < fp16MinNormal:
		m := math.Float32frombits(a)
		r := float32(float32(m+0.5) - 0.5)
		return math.Float32frombits(math.Float32bits(r) | b&0x80000000)
	}
	b += 0xfff + (b>>13)&1
	return math.Float32frombits(b &^ 0x1fff)
}
