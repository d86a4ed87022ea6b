package simd

import "github.com/gorgonia-parallel/gp/internal/simd/sse2"

// The baseline kernels: Go assembly with SSE2 (package sse2), which every amd64 CPU has,
// for the collectives of parallel/comm. They need no CPU check; like the C kernels they run
// only while [On] is true, so that level off is the Go code alone everywhere.

// SumF32 sets o[i] = ((x[0][i]+x[1][i])+x[2][i])+x[3][i] (2 to 4 inputs, each at least as
// long as o) for the whole multiples of 8 elements of o, bit for bit the scalar additions
// in that order, and returns how many elements it did; the caller adds the rest. It does
// none (returns 0) at level off, for other input counts, and off amd64. o may alias an
// input element for element.
func SumF32(o []float32, x [][]float32) int {
	if !On() {
		return 0
	}
	return sse2.SumF32(o, x)
}

// CopyNT copies src to dst (equal lengths). From 4 KiB up it writes with stores that bypass
// the cache (amd64, level not off): for results written into a buffer much larger than the
// cache, which nothing reads again soon, that saves the read of every destination line a
// normal store makes first.
func CopyNT(dst, src []byte) {
	if !On() {
		copy(dst, src)
		return
	}
	sse2.CopyNT(dst, src)
}

// PlusZeroNT sets dst[i] = src[i] + 0 (dst at least as long as src): bit for bit what adding
// src into a zeroed dst leaves (a -0 becomes +0, a signalling NaN is quieted), without
// reading dst. From 4 KiB up (amd64, level not off) it writes with stores that bypass the
// cache, for a result nothing reads again soon (a gradient written into a buffer much larger
// than the cache).
func PlusZeroNT(dst, src []float32) {
	if !On() {
		dst = dst[:len(src)]
		for i, v := range src {
			dst[i] = v + zeroF32
		}
		return
	}
	sse2.PlusZeroNT(dst, src)
}

// zeroF32 is a variable, not a constant, so that the compiler keeps the additions.
var zeroF32 float32
