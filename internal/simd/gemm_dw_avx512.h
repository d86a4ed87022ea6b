// A float32 GEMM for a linear layer's weight gradient, dw = dyᵀ·x: c (m×n) = aᵀ·b with a
// k×m and b k×n row-major, k the number of tokens (25088 in swin_t's first stage) and m, n
// the layer's channels (96 to 3072). OpenBLAS runs this long-reduction shape at about 100
// GFLOP/s at one thread, well below its roof.
//
// Each element is summed in k blocks of GPDW_KC rows counted from row 0: within a block its
// products in order with fused multiply-adds from zero, then the block's sum stored (the
// first block) or added to c (every later one). The blocks depend only on k, never on the
// columns or the threads a call is split into, so every split and both levels (the AVX2
// twin, gemm_dw_avx2.h, uses the same blocks) give the same bits.
//
// Blocking, per k block: a's rows are packed into strips of 8 columns ([kc][8], zero past
// m) and b's into panels of 48 columns ([kc][48]), both in a per-thread buffer in L2; a
// panel's block (24 KiB) stays in L1 while the strips stream past it; the micro-kernel keeps
// 8 rows of c by 3 vectors of 16 columns in 24 registers. Compiled for AVX-512 and called
// only at level AVX512 (level.go).

#include <immintrin.h>
#include <stdlib.h>
#include "gemm_dw_common.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,fma")
#pragma GCC optimize("fp-contract=off")

enum { GP5D_NB = 48 };

// gp5d_micro: c rows [0, mr) (mr <= 8) by NV vectors (ldc) from kc steps of the packed strip
// ap ([kc][8]) and panel bp ([kc][nb]); add: add the block's sums to c, else store them.
// One line of pf prefetched into L2 at each of the first npf steps.
static inline __attribute__((always_inline)) void gp5d_micro(int NV, int nb, int kc, const float *ap, const float *bp,
                                                            float *c, long ldc, int mr, int add,
                                                            const char *pf, long npf) {
	__m512 acc[8][3];
	for (int r = 0; r < 8; r++)
		for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
	for (int k = 0; k < kc; k++) {
		if (k < npf) _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
		__m512 bv[3];
		for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(bp + (long)k * nb + 16 * v);
		for (int r = 0; r < 8; r++) {
			__m512 ab = _mm512_set1_ps(ap[k * 8 + r]);
			for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ab, bv[v], acc[r][v]);
		}
	}
	for (int r = 0; r < mr; r++)
		for (int v = 0; v < NV; v++) {
			__m512 x = acc[r][v];
			if (add) x = _mm512_add_ps(_mm512_loadu_ps(c + r * ldc + 16 * v), x);
			_mm512_storeu_ps(c + r * ldc + 16 * v, x);
		}
}

static __thread float *gp5d_buf;
static __thread long gp5d_cap;

// gp5_sgemm_dw is c (m×n, ldc) = aᵀ·b, a k×m (lda), b k×n (ldb), n % 16 == 0. Returns 0,
// doing nothing, when the packing buffer cannot be allocated.
static int gp5_sgemm_dw(int m, int n, int k, const float *a, long lda, const float *b, long ldb, float *c, long ldc) {
	long ms = (m + 7) / 8 * 8;
	long need = (long)GPDW_KC * (ms + n);
	if (gp5d_cap < need) {
		float *p = aligned_alloc(64, ((need * sizeof(float) + 63) / 64) * 64);
		if (!p) return 0;
		free(gp5d_buf);
		gp5d_buf = p;
		gp5d_cap = need;
	}
	float *ap = gp5d_buf, *bp = gp5d_buf + (long)GPDW_KC * ms;
	for (int k0 = 0; k0 < k; k0 += GPDW_KC) {
		int kc = k - k0 < GPDW_KC ? k - k0 : GPDW_KC, add = k0 > 0;
		// Strip i0 (8 columns of a) at ap + i0·kc, laid out [kc][8]; strip by strip, so that
		// the writes are sequential (row by row, they would be kc·32 bytes apart, in one set of
		// the L1 cache).
		for (int i0 = 0; i0 < m; i0 += 8) {
			const float *ar = a + (long)k0 * lda + i0;
			float *d = ap + (long)i0 * kc;
			if (i0 + 8 <= m)
				for (int kk = 0; kk < kc; kk++) _mm256_storeu_ps(d + kk * 8, _mm256_loadu_ps(ar + kk * lda));
			else {
				__mmask8 mk = (__mmask8)((1u << (m - i0)) - 1);
				for (int kk = 0; kk < kc; kk++) _mm256_storeu_ps(d + kk * 8, _mm256_maskz_loadu_ps(mk, ar + kk * lda));
			}
		}
		// Panel j0 (nb columns of b) at bp + j0·kc, laid out [kc][nb].
		for (int j0 = 0; j0 < n; j0 += GP5D_NB) {
			int nb = n - j0 < GP5D_NB ? n - j0 : GP5D_NB;
			const float *br = b + (long)k0 * ldb + j0;
			float *d = bp + (long)j0 * kc;
			for (int kk = 0; kk < kc; kk++)
				for (int j = 0; j < nb; j += 16) _mm512_storeu_ps(d + (long)kk * nb + j, _mm512_loadu_ps(br + kk * ldb + j));
		}
		// The next block's rows, a's then b's, spread over this block's micro-kernel calls.
		gpdw_pf pf;
		gpdw_pf_init(&pf, a, lda, b, ldb, k0 + kc, k - (k0 + kc) < GPDW_KC ? k : k0 + kc + GPDW_KC);
		long calls = (m + 7) / 8 * ((n + GP5D_NB - 1) / GP5D_NB);
		long per = (pf.n[0] + pf.n[1] + calls - 1) / calls;
		if (per > kc) per = kc;
		for (int j0 = 0; j0 < n; j0 += GP5D_NB) {
			int nb = n - j0 < GP5D_NB ? n - j0 : GP5D_NB;
			const float *bpj = bp + (long)j0 * kc;
			for (int i0 = 0; i0 < m; i0 += 8) {
				int mr = m - i0 < 8 ? m - i0 : 8;
				const float *api = ap + (long)i0 * kc;
				float *ci = c + (long)i0 * ldc + j0;
				const char *pp;
				long np = gpdw_pf_take(&pf, per, &pp);
				switch (nb) {
				case 48: gp5d_micro(3, 48, kc, api, bpj, ci, ldc, mr, add, pp, np); break;
				case 32: gp5d_micro(2, 32, kc, api, bpj, ci, ldc, mr, add, pp, np); break;
				default: gp5d_micro(1, 16, kc, api, bpj, ci, ldc, mr, add, pp, np);
				}
			}
		}
		gpdw_pf_rest(&pf);
	}
	return 1;
}

#pragma GCC pop_options
