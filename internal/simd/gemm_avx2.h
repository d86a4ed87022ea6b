// gp5_sgemm_small (gemm_avx512.h) in AVX2+FMA, for level AVX2: the float32 GEMM of window
// attention's small products (49x49x32, 49x32x49), where a call into OpenBLAS costs as
// much as the arithmetic. c = alpha·op(a)·op(b), row-major; each element is the same chain
// of fused multiply-adds over k in order, then the product by alpha, as in the AVX-512
// kernel, so the two levels agree bit for bit.
//
// Register blocking: R rows by NV vectors of eight columns, 4x3 or 5x2 (8x1 when n is 8 or
// less): 10 to 12 accumulators, enough to keep two FMA units busy through their latency,
// with the NV vectors of b and one broadcast of a, in at most 16 ymm registers. 5x2 rather
// than 6x2: the FMA units are the bound, and 49 rows are ten blocks of five (one row
// computed twice) but nine of six (five rows twice). Blocks that would run past the last
// row or column are moved back to end at it instead of being masked: the elements they
// compute twice get the same value twice (beta is 0, and c is not an input). Only n < 8
// needs masked loads, and partial stores (gp2v_stp): vmaskmovps to memory is microcoded on
// AMD's cores (about 20 cycles on Zen 4). When tb, bᵀ is transposed in 8x8 register tiles
// (gp2g_transpose of avx2_common.h, which the AVX-512 kernel shares).

#include <immintrin.h>
#include "avx2_common.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")

// gp2g_block computes rows i0.. (R of them, from row pointers at ar apart, k steps ak apart)
// and NV vectors of columns at offsets off[v] of c = alpha·op(a)·b, b k×n row-major (ldb);
// with masked, NV is 1 and only the first nm columns (< 8) are read (mask ml) and written.
static inline __attribute__((always_inline)) void gp2g_block(int R, int NV, int masked, const float *a, long ar,
                                                            long ak, int k, float alpha, const float *b, long ldb,
                                                            const int *off, float *c, long ldc, __m256i ml, int nm) {
	__m256 acc[8][3];
	for (int r = 0; r < R; r++)
		for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();
	for (int kk = 0; kk < k; kk++) {
		const float *br = b + kk * ldb, *ap = a + kk * ak;
		__m256 bv[3];
		for (int v = 0; v < NV; v++) bv[v] = masked ? _mm256_maskload_ps(br, ml) : _mm256_loadu_ps(br + off[v]);
		for (int r = 0; r < R; r++) {
			__m256 ab = _mm256_broadcast_ss(ap + r * ar);
			for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(ab, bv[v], acc[r][v]);
		}
	}
	__m256 al = _mm256_set1_ps(alpha);
	for (int r = 0; r < R; r++) {
		float *cr = c + r * ldc;
		for (int v = 0; v < NV; v++) {
			__m256 x = _mm256_mul_ps(acc[r][v], al);
			if (masked)
				gp2v_stp(cr, x, nm);
			else
				_mm256_storeu_ps(cr + off[v], x);
		}
	}
}

// gp2g_rows runs gp2g_block over every row, R at a time; the last block starts at m - R
// (overlapping the one before) when m is not a multiple of R; when m < R, one row at a time.
static inline __attribute__((always_inline)) void gp2g_rows(int R, int NV, int masked, int ta, int m, int k,
                                                           float alpha, const float *a, long lda, const float *b,
                                                           long ldb, const int *off, float *c, long ldc, __m256i ml,
                                                           int nm) {
	long ar = ta ? 1 : lda, ak = ta ? lda : 1;
	if (m < R) {
		// Few rows (tests, not attention): one row at a time.
		for (int i = 0; i < m; i++) gp2g_block(1, NV, masked, a + i * ar, ar, ak, k, alpha, b, ldb, off, c + i * ldc, ldc, ml, nm);
		return;
	}
	for (int i = 0;; i += R) {
		int i0 = i + R <= m ? i : m - R;
		gp2g_block(R, NV, masked, a + i0 * ar, ar, ak, k, alpha, b, ldb, off, c + i0 * ldc, ldc, ml, nm);
		if (i0 + R >= m) break;
	}
}

// gp2_sgemm_small is gp5_sgemm_small: c (m×n, ldc) = alpha·op(a)·op(b) with op(a) m×k,
// op(b) k×n. When tb, bᵀ is copied to the stack first (k·n floats: the caller keeps it
// small).
static void gp2_sgemm_small(int ta, int tb, int m, int n, int k, float alpha, const float *a, long lda, const float *b,
                            long ldb, float *c, long ldc) {
	float bt[tb ? k * n + 1 : 1];
	if (tb) {
		gp2g_transpose(b, ldb, n, k, bt);
		b = bt;
		ldb = n;
	}
	if (n < 8) {
		int off[1] = {0};
		gp2g_rows(8, 1, 1, ta, m, k, alpha, a, lda, b, ldb, off, c, ldc, gp2v_m8(n), n);
		return;
	}
	// The vectors of a row: nv of them, the last ending at column n. They go in blocks of
	// three (4 rows) or two (5 rows), one only when nv is 1 (8 rows: four accumulators would
	// leave the FMA units waiting on their latency).
	int nv = (n + 7) / 8;
	__m256i none = _mm256_setzero_si256();
	for (int v0 = 0; v0 < nv;) {
		int NV = nv - v0 == 1 ? 1 : nv - v0 == 2 || nv - v0 == 4 ? 2 : 3;
		int off[3];
		for (int v = 0; v < NV; v++) off[v] = 8 * (v0 + v) < n - 8 ? 8 * (v0 + v) : n - 8;
		switch (NV) {
		case 1: gp2g_rows(8, 1, 0, ta, m, k, alpha, a, lda, b, ldb, off, c, ldc, none, 0); break;
		case 2: gp2g_rows(5, 2, 0, ta, m, k, alpha, a, lda, b, ldb, off, c, ldc, none, 0); break;
		default: gp2g_rows(4, 3, 0, ta, m, k, alpha, a, lda, b, ldb, off, c, ldc, none, 0); break;
		}
		v0 += NV;
	}
}

#pragma GCC pop_options
