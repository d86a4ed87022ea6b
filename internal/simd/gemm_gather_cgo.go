//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "gemm_gather_avx512.h"
*/
import "C"

import "unsafe"

// GemmGather32 is c = a ⊛ bp for float32 with the inner dimension gathered through tables:
// for rows i < m and columns j < n of c (ldc), c[i·ldc + j] = Σ over kk < len(ka) of
// a[i·lda + ka[kk]] · bp[kb[kk] + j], each element's products summed in table order with
// fused multiply-adds from zero. bp is packed
// by the caller: each kb[kk] is the start of a row of at least n floats, and the kernel
// reads whole vectors of 16, so a row's floats up to n rounded up to 16 must be there (zero
// past n). The sums do not depend on how a caller splits c's rows or columns into calls. It
// returns false, doing nothing, below level AVX512, for m, n or the table length below 1,
// tables of different lengths, or an index that would read outside a or bp.
func GemmGather32(m, n int, a []float32, lda int, ka []int32, bp []float32, kb []int32, c []float32, ldc int) bool {
	k := len(ka)
	if Current() != AVX512 || m < 1 || n < 1 || k < 1 || len(kb) != k || ldc < n || lda < 0 {
		return false
	}
	// The kernel reads and writes without bounds checks: check every index once.
	maxA, maxB := int32(0), int32(0)
	for kk := range ka {
		if ka[kk] < 0 || kb[kk] < 0 {
			return false
		}
		maxA, maxB = max(maxA, ka[kk]), max(maxB, kb[kk])
	}
	if (m-1)*lda+int(maxA) >= len(a) || int(maxB)+(n+15)/16*16 > len(bp) || (m-1)*ldc+n > len(c) {
		return false
	}
	C.gp5_sgemm_gather(C.int(m), C.int(n), C.int(k), f32p(a), C.long(lda), (*C.int)(unsafe.Pointer(&ka[0])), f32p(bp),
		(*C.int)(unsafe.Pointer(&kb[0])), f32p(c), C.long(ldc))
	return true
}
