// A float32 GEMM for the small products of window attention (49x49x32, 49x32x49), where a
// call into OpenBLAS costs as much as the arithmetic: c = alpha·op(a)·op(b), row-major, the
// product over k summed in order per element, as OpenBLAS's kernels do. Compiled for
// AVX-512 and called only at level AVX512 (level.go).
//
// Register blocking: up to seven rows by up to four vectors of 16 columns (the last vector
// masked), 7x1, 7x2, 7x3 or 6x4 (24 to 28 accumulators, which keep both FMA ports busy on
// attention's 49x32x49 and 49x49x32), the rows that do not fill a block in one smaller block
// (49 rows: seven blocks of seven, or eight of six and one row). When tb, bᵀ is transposed
// in 8x8 register tiles (gp2g_transpose of avx2_common.h).

#include <immintrin.h>
#include "avx2_common.h"

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

static inline __mmask16 gp5_sm_mask(int n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

// gp5_sm_block computes R rows (from row pointers at ar apart, k steps ak apart) and NV
// vectors of 16 columns (the last masked by ml) of c = alpha·op(a)·b, b k×n row-major (ldb).
static inline __attribute__((always_inline)) void gp5_sm_block(int R, int NV, const float *a, long ar, long ak, int k,
                                                              float alpha, const float *b, long ldb, float *c,
                                                              long ldc, __mmask16 ml) {
	__m512 acc[7][4];
	for (int r = 0; r < R; r++)
		for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
	for (int kk = 0; kk < k; kk++) {
		const float *br = b + kk * ldb, *ap = a + kk * ak;
		__m512 bv[4];
		for (int v = 0; v < NV; v++) bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(ml, br + 16 * v) : _mm512_loadu_ps(br + 16 * v);
		for (int r = 0; r < R; r++) {
			__m512 ab = _mm512_set1_ps(ap[r * ar]);
			for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ab, bv[v], acc[r][v]);
		}
	}
	__m512 al = _mm512_set1_ps(alpha);
	for (int r = 0; r < R; r++) {
		float *cr = c + r * ldc;
		for (int v = 0; v < NV; v++) {
			__m512 x = _mm512_mul_ps(acc[r][v], al);
			if (v == NV - 1)
				_mm512_mask_storeu_ps(cr + 16 * v, ml, x);
			else
				_mm512_storeu_ps(cr + 16 * v, x);
		}
	}
}

// GP_SM_ROWS runs gp5_sm_block over the m rows, RM at a time, the remaining rows (fewer
// than RM, at most 6) in one block.
#define GP_SM_BLOCK(R, NV, i) gp5_sm_block(R, NV, a + (i) * ar, ar, ak, k, alpha, bj, ldb, cj + (i) * ldc, ldc, ml)
#define GP_SM_ROWS(RM, NV)                                       \
	do {                                                         \
		int i = 0;                                               \
		for (; i + RM <= m; i += RM) GP_SM_BLOCK(RM, NV, i);     \
		switch (m - i) {                                         \
		case 1: GP_SM_BLOCK(1, NV, i); break;                    \
		case 2: GP_SM_BLOCK(2, NV, i); break;                    \
		case 3: GP_SM_BLOCK(3, NV, i); break;                    \
		case 4: GP_SM_BLOCK(4, NV, i); break;                    \
		case 5: GP_SM_BLOCK(5, NV, i); break;                    \
		case 6: GP_SM_BLOCK(6, NV, i); break;                    \
		}                                                        \
	} while (0)

// gp5_sgemm_small is c (m×n, ldc) = alpha·op(a)·op(b) with op(a) m×k, op(b) k×n. When tb,
// bᵀ is copied to the stack first (k·n floats: the caller keeps it small).
static void gp5_sgemm_small(int ta, int tb, int m, int n, int k, float alpha, const float *a, long lda, const float *b,
                           long ldb, float *c, long ldc) {
	float bt[tb ? k * n + 1 : 1];
	if (tb) {
		gp2g_transpose(b, ldb, n, k, bt);
		b = bt;
		ldb = n;
	}
	long ar = ta ? 1 : lda, ak = ta ? lda : 1;
	for (int j0 = 0; j0 < n; j0 += 64) {
		int w = n - j0 < 64 ? n - j0 : 64;
		int NV = (w + 15) / 16;
		__mmask16 ml = gp5_sm_mask(w - 16 * (NV - 1));
		const float *bj = b + j0;
		float *cj = c + j0;
		switch (NV) {
		case 1: GP_SM_ROWS(7, 1); break;
		case 2: GP_SM_ROWS(7, 2); break;
		case 3: GP_SM_ROWS(7, 3); break;
		default: GP_SM_ROWS(6, 4); break;
		}
	}
}

#undef GP_SM_ROWS
#undef GP_SM_BLOCK

#pragma GCC pop_options
