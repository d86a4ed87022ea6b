//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "gemm_rows_avx512.h"
*/
import "C"

// GemmRowsFits reports whether GemmRows32 takes this product at the active level: AVX-512
// only, n a multiple of 16, at least 4096 rows, op(b) at most 768×768, and k at most 768
// when b is transposed (a linear layer's forward, y = x·wᵀ + b) or 384 when not (its data
// gradient, dx = dy·w): the shapes of swin_t's first two stages, where the kernel was
// measured faster than OpenBLAS at one thread (1.1x to 1.5x per layer, the bias in its
// epilogue included) and slower beyond those k (0.65x on 6272x192x768 untransposed).
func GemmRowsFits(tB bool, m, n, k int) bool { return m >= 4096 && rowsShape(tB, n, k) }

// rowsShape is GemmRowsFits without the bound on rows, which applies to a whole product and
// not to the row blocks it is split into.
func rowsShape(tB bool, n, k int) bool {
	maxK := 384
	if tB {
		maxK = 768
	}
	return Current() == AVX512 && n > 0 && n%16 == 0 && k > 0 && k <= maxK && k*n <= 768*768
}

// GemmRows32 is c = a·op(b) (+ bias on every row when bias is not nil) for float32,
// row-major: a m×k (lda), op(b) k×n (b k×n with ldb, or when tB bᵀ with b n×k), c m×n (ldc),
// bias n or nil. Each element is the sum of its k products in order with fused
// multiply-adds, then the bias added, as OpenBLAS computes it with beta 1 over a bias-filled
// c. It returns false, doing nothing, when the shape is not one GemmRowsFits takes (any
// m >= 1 is, so that a product that fits can be split into row blocks) or the kernel's
// packing buffer cannot be allocated: the caller then runs its BLAS.
func GemmRows32(tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int) bool {
	if m < 1 || !rowsShape(tB, n, k) || lda < k || ldc < n || (tB && ldb < k) || (!tB && ldb < n) {
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
