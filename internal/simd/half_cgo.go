//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "half_avx512.h"
#include "half_avx2.h"
*/
import "C"

// The kernels convert the first n&^15 elements and return how many they did; the caller's Go
// loop does the rest. The AVX2 binary16 kernels need F16C, which every AVX2 CPU we know of
// has; without it they convert nothing.

var hasF16C = C.gp_has_f16c() != 0

func f32ToBF16Kernel(dst []uint16, src []float32) int {
	n := len(src) &^ 15
	if Current() == AVX512 {
		C.gp5_f32_to_bf16(u16p(dst), f32p(src), C.long(n))
	} else {
		C.gp2_f32_to_bf16(u16p(dst), f32p(src), C.long(n))
	}
	return n
}

func bf16ToF32Kernel(dst []float32, src []uint16) int {
	n := len(src) &^ 15
	if Current() == AVX512 {
		C.gp5_bf16_to_f32(f32p(dst), u16p(src), C.long(n))
	} else {
		C.gp2_bf16_to_f32(f32p(dst), u16p(src), C.long(n))
	}
	return n
}

func f32ToF16Kernel(dst []uint16, src []float32) int {
	n := len(src) &^ 15
	switch {
	case Current() == AVX512:
		C.gp5_f32_to_f16(u16p(dst), f32p(src), C.long(n))
	case hasF16C:
		C.gp2_f32_to_f16(u16p(dst), f32p(src), C.long(n))
	default:
		return 0
	}
	return n
}

func f16ToF32Kernel(dst []float32, src []uint16) int {
	n := len(src) &^ 15
	switch {
	case Current() == AVX512:
		C.gp5_f16_to_f32(f32p(dst), u16p(src), C.long(n))
	case hasF16C:
		C.gp2_f16_to_f32(f32p(dst), u16p(src), C.long(n))
	default:
		return 0
	}
	return n
}
