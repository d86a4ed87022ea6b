//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "gemm_dw_avx512.h"
#include "gemm_dw_avx2.h"

// gp_sgemm_dw runs gp5_sgemm_dw at level 5 (AVX-512) or gp2_sgemm_dw at level 2 (AVX2).
static int gp_sgemm_dw(int level, int m, int n, int k, const float *a, long lda, const float *b, long ldb, float *c,
                       long ldc) {
	if (level == 5) return gp5_sgemm_dw(m, n, k, a, lda, b, ldb, c, ldc);
	return gp2_sgemm_dw(m, n, k, a, lda, b, ldb, c, ldc);
}
*/
import "C"

// gemmDWBlock is the number of rows of k GemmDW32 sums in one block (the kernels' GPDW_KC).
const gemmDWBlock = C.GPDW_KC

// GemmDW32 is a linear layer's weight gradient, c = aᵀ·b for float32, row-major: a k×m
// (lda; dy, k tokens by m output channels), b k×n (ldb; x, by n input channels), c m×n
// (ldc). Each element is summed in blocks of 128 rows of k counted from row 0: the
// block's products in order with fused multiply-adds from zero, then the block's sum stored
// (the first block) or added to the element (every later one), so the result is the same
// bits at both levels and for any split of c's rows or columns into calls (what nn/ops's
// gemmDW threads do). It returns false, doing nothing, at level Off, for n not a multiple of 16, m, n or k
// below 1, strides too short, or when the kernel's packing buffer cannot be allocated: the
// caller then runs its BLAS.
func GemmDW32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	if !GemmDWTakes(m, n, k) || lda < m || ldb < n || ldc < n {
		return false
	}
	// The kernel reads and writes without bounds checks: check the last element of each.
	_ = a[(k-1)*lda+m-1]
	_ = b[(k-1)*ldb+n-1]
	_ = c[(m-1)*ldc+n-1]
	level := 2
	if Current() == AVX512 {
		level = 5
	}
	return C.gp_sgemm_dw(C.int(level), C.int(m), C.int(n), C.int(k), f32p(a), C.long(lda), f32p(b), C.long(ldb),
		f32p(c), C.long(ldc)) != 0
}

// GemmDWFits reports whether a linear layer's weight gradient, c (m×n) = aᵀ·b with k rows,
// goes to GemmDW32 at the active level: n a multiple of 16, and either at least 4096 rows
// with c at most 768×192 (swin_t's first two stages, where the kernel was measured 1.1x to
// 1.35x faster than OpenBLAS at one thread), or, at level AVX512 only, at least 1536 rows
// with c at most 384×384 (its third stage's attention projection, 1568 rows: 1.15x to
// 1.19x; 0.58x at AVX2 against OpenBLAS's AVX-512 kernels). Larger c (the third stage's
// other layers and the fourth's, 1568 and 392 rows) measured 0.8x to 1.04x: each block of k
// rows reads and writes all of c again, and OpenBLAS is already near its roof there.
func GemmDWFits(m, n, k int) bool {
	if !GemmDWTakes(m, n, k) {
		return false
	}
	return k >= 4096 && m*n <= 768*192 || Current() == AVX512 && k >= 1536 && m*n <= 384*384
}

// GemmDWTakes reports whether GemmDW32 can compute this product at the active level,
// whatever its speed against the BLAS: a level other than Off, m and k positive, n a
// positive multiple of 16 (GemmDW32 refuses the rest). GemmDWFits says where it was
// measured faster than OpenBLAS's AVX-512 kernels.
func GemmDWTakes(m, n, k int) bool { return Current() != Off && m > 0 && n > 0 && n%16 == 0 && k > 0 }
