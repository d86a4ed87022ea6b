package simd

import "math"

// 16-bit floating-point formats, stored as uint16 bit patterns:
//
//   - bfloat16: the upper half of a float32 (8 exponent bits, 7 significand bits).
//   - IEEE 754 binary16 ("fp16", "half"): 5 exponent bits, 10 significand bits, subnormals,
//     largest finite value 65504.
//
// Narrowing rounds to nearest, ties to even; values beyond the format's range become ±Inf;
// NaNs stay NaN, made quiet (the top significand bit set) with the rest of their payload
// truncated, as x86's VCVTPS2PH and VCVTNEPS2BF16 do. Widening is exact (a NaN is made quiet).
// Every level computes the same bits as the Go code.

// F32ToBF16 sets dst[i] to src[i] rounded to bfloat16, for i < len(src); dst must be at least
// as long as src.
func F32ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	d := 0
	if On() && len(src) >= minLen {
		d = f32ToBF16Kernel(dst, src)
	}
	for i := d; i < len(src); i++ {
		dst[i] = BF16FromF32(src[i])
	}
}

// BF16ToF32 sets dst[i] to the float32 value of the bfloat16 src[i], for i < len(src); dst
// must be at least as long as src.
func BF16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	d := 0
	if On() && len(src) >= minLen {
		d = bf16ToF32Kernel(dst, src)
	}
	for i := d; i < len(src); i++ {
		dst[i] = BF16ToF32One(src[i])
	}
}

// F32ToF16 sets dst[i] to src[i] rounded to IEEE binary16, for i < len(src); dst must be at
// least as long as src.
func F32ToF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	d := 0
	if On() && len(src) >= minLen {
		d = f32ToF16Kernel(dst, src)
	}
	for i := d; i < len(src); i++ {
		dst[i] = F16FromF32(src[i])
	}
}

// F16ToF32 sets dst[i] to the float32 value of the binary16 src[i], for i < len(src); dst must
// be at least as long as src.
func F16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	d := 0
	if On() && len(src) >= minLen {
		d = f16ToF32Kernel(dst, src)
	}
	for i := d; i < len(src); i++ {
		dst[i] = F16ToF32One(src[i])
	}
}

// BF16FromF32 is x rounded to bfloat16 (ties to even; a NaN stays a quiet NaN).
func BF16FromF32(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16((b | 0x00400000) >> 16)
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32One is the float32 value of the bfloat16 h (exact).
func BF16ToF32One(h uint16) float32 {
	b := uint32(h) << 16
	if b&0x7fffffff > 0x7f800000 {
		b |= 0x00400000
	}
	return math.Float32frombits(b)
}

// F16FromF32 is x rounded to IEEE binary16 (ties to even, subnormals kept, overflow to ±Inf,
// a NaN stays a quiet NaN).
func F16FromF32(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal binary16: the value is h·2⁻²⁴ with h = (1.man)·2^(e-1+10) = man' >> (14-e).
		if e < -10 {
			return sign // below half of the smallest subnormal
		}
		man |= 0x800000
		shift := uint32(14 - e)
		h := man >> shift
		rem, half := man&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || rem == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // a carry out of the significand bumps the exponent, up to Inf
	}
	return sign | uint16(h)
}

// F16ToF32One is the float32 value of the binary16 h (exact).
func F16ToF32One(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && man != 0:
		return math.Float32frombits(sign | 0x7fc00000 | man<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0:
		v := float32(man) * (1.0 / (1 << 24)) // exact: man < 2^10
		if sign != 0 {
			return -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}
