// A float32 GEMM for the small products of window attention (49x49x32, 49x32x49), where a
// call into OpenBLAS costs as much as the arithmetic: c = alpha·op(a)·op(b), row-major, the
// product over k summed in order per element, as OpenBLAS's kernels do. Compiled for
// AVX-512 and called only at level AVX512 (level.go).

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

static inline __mmask16 gp5_sm_mask(int n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

// gp5_sm_block computes rows [i0, i0+R) and columns [j0, j0+16·NV) (the last vector masked by
// ml) of c = alpha·op(a)·b with b k×n row-major (ldb).
static inline __attribute__((always_inline)) void gp5_sm_block(int R, int NV, int ta, int i0, int j0, int k, float alpha,
                                                              const float *a, long lda, const float *b, long ldb,
                                                              float *c, long ldc, __mmask16 ml) {
	__m512 acc[4][4];
	for (int r = 0; r < R; r++)
		for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
	for (int kk = 0; kk < k; kk++) {
		const float *br = b + kk * ldb + j0;
		__m512 bv[4];
		for (int v = 0; v < NV; v++) bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(ml, br + 16 * v) : _mm512_loadu_ps(br + 16 * v);
		for (int r = 0; r < R; r++) {
			float av = ta ? a[kk * lda + i0 + r] : a[(i0 + r) * lda + kk];
			__m512 ab = _mm512_set1_ps(av);
			for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ab, bv[v], acc[r][v]);
		}
	}
	__m512 al = _mm512_set1_ps(alpha);
	for (int r = 0; r < R; r++) {
		float *cr = c + (i0 + r) * ldc + j0;
		for (int v = 0; v < NV; v++) {
			__m512 x = _mm512_mul_ps(acc[r][v], al);
			if (v == NV - 1)
				_mm512_mask_storeu_ps(cr + 16 * v, ml, x);
			else
				_mm512_storeu_ps(cr + 16 * v, x);
		}
	}
}

#define GP_SM_ROWS(NV)                                                                                   \
	do {                                                                                                 \
		int i = 0;                                                                                       \
		for (; i + 4 <= m; i += 4) gp5_sm_block(4, NV, ta, i, j0, k, alpha, a, lda, b, ldb, c, ldc, ml); \
		for (; i < m; i++) gp5_sm_block(1, NV, ta, i, j0, k, alpha, a, lda, b, ldb, c, ldc, ml);         \
	} while (0)

// gp5_sgemm_small is c (m×n, ldc) = alpha·op(a)·op(b) with op(a) m×k, op(b) k×n. When tb,
// bᵀ is copied to the stack first (k·n floats: the caller keeps it small).
static void gp5_sgemm_small(int ta, int tb, int m, int n, int k, float alpha, const float *a, long lda, const float *b,
                           long ldb, float *c, long ldc) {
	float bt[tb ? k * n + 1 : 1];
	if (tb) {
		for (int j = 0; j < n; j++)
			for (int kk = 0; kk < k; kk++) bt[kk * n + j] = b[j * ldb + kk];
		b = bt;
		ldb = n;
	}
	for (int j0 = 0; j0 < n; j0 += 64) {
		int w = n - j0 < 64 ? n - j0 : 64;
		int NV = (w + 15) / 16;
		__mmask16 ml = gp5_sm_mask(w - 16 * (NV - 1));
		switch (NV) {
		case 1: GP_SM_ROWS(1); break;
		case 2: GP_SM_ROWS(2); break;
		case 3: GP_SM_ROWS(3); break;
		default: GP_SM_ROWS(4); break;
		}
	}
}

#pragma GCC pop_options
