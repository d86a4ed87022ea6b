//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "gemm_rows_avx512.h"
*/
import "C"

// GemmRowsFits reports whether GemmRows32 takes this product at the active level: AVX-512
// only, n a multiple of 16, at least 1024 rows, op(b) at most 384×384, and a shape where the
// kernel was measured faster than OpenBLAS at one thread (n at most 96, or k at most 96 with
// b not transposed: swin_t's first-stage linear layers and their data gradients).
func GemmRowsFits(tB bool, m, n, k int) bool {
	return Current() == AVX512 && n > 0 && n%16 == 0 && k > 0 && m >= 1024 && k*n <= 384*384 &&
		(n <= 96 || (!tB && k <= 96))
}

// GemmRows32 is c = a·op(b) (+ bias on every row when bias is not nil) for float32,
// row-major: a m×k (lda), op(b) k×n (b k×n with ldb, or when tB bᵀ with b n×k), c m×n (ldc),
// bias n or nil. Each element is the sum of its k products in order with fused
// multiply-adds, then the bias added, as OpenBLAS computes it with beta 1 over a bias-filled
// c. It returns false, doing nothing, when GemmRowsFits does not hold (or the kernel's
// packing buffer cannot be allocated): the caller then runs its BLAS.
func GemmRows32(tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int) bool {
	if !GemmRowsFits(tB, m, n, k) || lda < k || ldc < n || (tB && ldb < k) || (!tB && ldb < n) {
		return false
	}
	// The kernel reads and writes without bounds checks: check the last element of each.
	_ = a[(m-1)*lda+k-1]
	if tB {
		_ = b[(n-1)*ldb+k-1]
	} else {
		_ = b[(k-1)*ldb+n-1]
	}
	_ = c[(m-1)*ldc+n-1]
	if bias != nil {
		_ = bias[n-1]
	}
	return C.gp5_sgemm_rows(cbool(tB), C.int(m), C.int(n), C.int(k), f32p(a), C.long(lda), f32p(b), C.long(ldb),
		f32p(bias), f32p(c), C.long(ldc)) != 0
}
