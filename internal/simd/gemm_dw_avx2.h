// gp5_sgemm_dw (gemm_dw_avx512.h) in AVX2+FMA, for level AVX2: a linear layer's weight
// gradient, c (m×n) = aᵀ·b with a k×m and b k×n row-major and a long k. The same k blocks
// of GPDW_KC rows and the same order of operations within each, so the two levels agree bit
// for bit.
//
// Blocking, per k block: a's rows packed into strips of 6 columns ([kc][6], zero past m),
// b's into panels of 16 columns ([kc][16]); the micro-kernel keeps 6 rows of c by 2 vectors
// of 8 columns in 12 of the 16 ymm registers, with the 2 vectors of b and a broadcast of a
// (4 rows by 3 vectors would need all 16, and GCC then keeps the sums on the stack).

#include <immintrin.h>
#include <stdlib.h>
#include "gemm_dw_common.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")

enum { GP2D_NB = 16 };

// gp2d_micro: c rows [0, mr) (mr <= 6) by NV vectors (ldc) from kc steps of the packed strip
// ap ([kc][6]) and panel bp ([kc][nb]); add: add the block's sums to c, else store them.
// One line of pf prefetched into L2 at each of the first npf steps.
static inline __attribute__((always_inline)) void gp2d_micro(int NV, int nb, int kc, const float *ap, const float *bp,
                                                            float *c, long ldc, int mr, int add,
                                                            const char *pf, long npf) {
	__m256 acc[6][2];
	for (int r = 0; r < 6; r++)
		for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();
	for (int k = 0; k < kc; k++) {
		if (k < npf) _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
		__m256 bv[2];
		for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(bp + (long)k * nb + 8 * v);
		for (int r = 0; r < 6; r++) {
			__m256 ab = _mm256_broadcast_ss(ap + k * 6 + r);
			for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(ab, bv[v], acc[r][v]);
		}
	}
	for (int r = 0; r < 6; r++)
		for (int v = 0; v < NV; v++) {
			if (r >= mr) break; // a constant bound, so that acc stays in registers
			__m256 x = acc[r][v];
			if (add) x = _mm256_add_ps(_mm256_loadu_ps(c + r * ldc + 8 * v), x);
			_mm256_storeu_ps(c + r * ldc + 8 * v, x);
		}
}

static __thread float *gp2d_buf;
static __thread long gp2d_cap;

// gp2_sgemm_dw is gp5_sgemm_dw at level AVX2: c (m×n, ldc) = aᵀ·b, a k×m (lda), b k×n
// (ldb), n % 16 == 0 (GemmDW32 refuses other n), so each panel is two vectors wide. Returns 0, doing nothing, when the packing buffer cannot be allocated.
static int gp2_sgemm_dw(int m, int n, int k, const float *a, long lda, const float *b, long ldb, float *c, long ldc) {
	long ms = (m + 5) / 6 * 6;
	long need = (long)GPDW_KC * (ms + n);
	if (gp2d_cap < need) {
		float *p = aligned_alloc(64, ((need * sizeof(float) + 63) / 64) * 64);
		if (!p) return 0;
		free(gp2d_buf);
		gp2d_buf = p;
		gp2d_cap = need;
	}
	float *ap = gp2d_buf, *bp = gp2d_buf + (long)GPDW_KC * ms;
	for (int k0 = 0; k0 < k; k0 += GPDW_KC) {
		int kc = k - k0 < GPDW_KC ? k - k0 : GPDW_KC, add = k0 > 0;
		// Strip i0 (6 columns of a) at ap + i0·kc, laid out [kc][6]; strip by strip, so that
		// the writes are sequential (row by row, they would be kc·24 bytes apart).
		for (int i0 = 0; i0 < m; i0 += 6) {
			const float *ar = a + (long)k0 * lda + i0;
			float *d = ap + (long)i0 * kc;
			if (i0 + 6 <= m)
				for (int kk = 0; kk < kc; kk++) {
					_mm_storeu_ps(d + kk * 6, _mm_loadu_ps(ar + kk * lda));
					d[kk * 6 + 4] = ar[kk * lda + 4];
					d[kk * 6 + 5] = ar[kk * lda + 5];
				}
			else
				for (int kk = 0; kk < kc; kk++)
					for (int r = 0; r < 6; r++) d[kk * 6 + r] = i0 + r < m ? ar[kk * lda + r] : 0.0f;
		}
		// Panel j0 (nb columns of b) at bp + j0·kc, laid out [kc][nb].
		for (int j0 = 0; j0 < n; j0 += GP2D_NB) {
			int nb = n - j0 < GP2D_NB ? n - j0 : GP2D_NB;
			const float *br = b + (long)k0 * ldb + j0;
			float *d = bp + (long)j0 * kc;
			for (int kk = 0; kk < kc; kk++)
				for (int j = 0; j < nb; j += 8) _mm256_storeu_ps(d + (long)kk * nb + j, _mm256_loadu_ps(br + kk * ldb + j));
		}
		// The next block's rows, a's then b's, spread over this block's micro-kernel calls.
		gpdw_pf pf;
		gpdw_pf_init(&pf, a, lda, b, ldb, k0 + kc, k - (k0 + kc) < GPDW_KC ? k : k0 + kc + GPDW_KC);
		long calls = (m + 5) / 6 * ((n + GP2D_NB - 1) / GP2D_NB);
		long per = (pf.n[0] + pf.n[1] + calls - 1) / calls;
		if (per > kc) per = kc;
		for (int j0 = 0; j0 < n; j0 += GP2D_NB) {
			const float *bpj = bp + (long)j0 * kc;
			for (int i0 = 0; i0 < m; i0 += 6) {
				int mr = m - i0 < 6 ? m - i0 : 6;
				const float *api = ap + (long)i0 * kc;
				float *ci = c + (long)i0 * ldc + j0;
				const char *pp;
				long np = gpdw_pf_take(&pf, per, &pp);
				gp2d_micro(2, GP2D_NB, kc, api, bpj, ci, ldc, mr, add, pp, np);
			}
		}
		gpdw_pf_rest(&pf);
	}
	return 1;
}

#pragma GCC pop_options
