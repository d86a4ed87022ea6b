// A float32 GEMM for the tall, narrow products of the linear layers of a transformer's early
// stages (25088 tokens by 96 to 768 channels), where OpenBLAS's kernels reach about 100
// GFLOP/s at one thread against about 150 on square products, and a bias costs a pass over
// c before the BLAS call: c = a·op(b) (+ bias on every row), or c += a·op(b), row-major, a
// m×k, op(b) k×n. Each element's products over k are summed in order with fused
// multiply-adds from zero (or from c's element) and the bias added last, as OpenBLAS's
// AVX-512 kernels do with beta 1 over a bias-filled c. Also the products of every shape
// where OpenBLAS runs narrower kernels than the CPU's (nn/ops's ownGEMM), n any width: a
// last panel that 16 does not divide is padded with zero columns and its c read and written
// under a mask. Compiled for AVX-512 and called only at level AVX512 (level.go).
//
// Blocking: op(b) is packed once per call into 48-column panels ([k][48], in a per-thread
// buffer); rows go in chunks of 64 (a's chunk in L2, c's in L1), k in blocks of 128 (a
// panel's block, 24 KiB, in L1); the micro-kernel keeps 8 rows by 3 vectors of 16 columns
// in 24 registers, with the partial sums of earlier k blocks kept in c. Where 48 does not
// divide n and 64 does (a convolution's forward over 64 output pixels), the panels are 64
// columns wide and the micro-kernel 6 rows by 4 vectors: the same sums.

#include <immintrin.h>
#include <stdlib.h>

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

enum { GP5R_MB = 64, GP5R_KC = 128, GP5R_NB = 48 };

// gp5r_micro: rows [0, MR) by NV vectors of c (ldc) from kc steps of a (lda) and the packed
// panel bp ([kc][nb], nb a multiple of 16); load: start from c's partial sums; bias (or
// null): add it and finish; last: the lanes of the last vector that are c's columns (all 16
// but in a panel that ends past n); PF (a constant): prefetch one line of pf into L2 at each
// of the first npf steps.
static inline __attribute__((always_inline)) void gp5r_micro(int MR, int NV, int nb, int kc, const float *a, long lda,
                                                            const float *bp, float *c, long ldc, int load,
                                                            const float *bias, __mmask16 last, int PF, const char *pf,
                                                            long npf) {
	__m512 acc[8][4];
	for (int r = 0; r < MR; r++)
		for (int v = 0; v < NV; v++) {
			__mmask16 mk = v == NV - 1 ? last : 0xffff;
			acc[r][v] = load ? _mm512_maskz_loadu_ps(mk, c + r * ldc + 16 * v) : _mm512_setzero_ps();
		}
	for (int k = 0; k < kc; k++) {
		if (PF && k < npf) _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
		__m512 bv[4];
		for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(bp + (long)k * nb + 16 * v);
		for (int r = 0; r < MR; r++) {
			__m512 ab = _mm512_set1_ps(a[r * lda + k]);
			for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ab, bv[v], acc[r][v]);
		}
	}
	for (int r = 0; r < MR; r++)
		for (int v = 0; v < NV; v++) {
			__mmask16 mk = v == NV - 1 ? last : 0xffff;
			__m512 x = acc[r][v];
			if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, bias + 16 * v));
			_mm512_mask_storeu_ps(c + r * ldc + 16 * v, mk, x);
		}
}

static __thread float *gp5r_buf;
static __thread long gp5r_cap;

// gp5_sgemm_rows is c (m×n, ldc) = a (m×k, lda)·op(b) (+ bias[j] on every row when bias is
// not null), or when add c += a·op(b), the sums continuing from c's elements; op(b) is b
// (k×n, ldb) or, when tb, bᵀ with b n×k. Where 16 does not divide n the last panel is
// packed with zero columns up to a multiple of 16, and its last vector of c is read and
// written under a mask. Returns 0, doing nothing, when the packing buffer cannot be
// allocated.
static int gp5_sgemm_rows(int tb, int add, int m, int n, int k, const float *a, long lda, const float *b, long ldb,
                          const float *bias, float *c, long ldc) {
	const int n16 = (n + 15) / 16 * 16;
	long need = (long)k * n16;
	if (gp5r_cap < need) {
		float *p = aligned_alloc(64, ((need * sizeof(float) + 63) / 64) * 64);
		if (!p) return 0;
		free(gp5r_buf);
		gp5r_buf = p;
		gp5r_cap = need;
	}
	float *bp = gp5r_buf;
	// Panels of 64 columns (6 rows by 4 vectors) where 48 does not divide n and 64 does.
	const int NB = n % GP5R_NB != 0 && n % 64 == 0 ? 64 : GP5R_NB;
	// Panel j0 (nb columns, padded with zero columns to np, a multiple of 16) at bp + j0·k,
	// laid out [k][np].
	for (int j0 = 0; j0 < n; j0 += NB) {
		int nb = n - j0 < NB ? n - j0 : NB, np = (nb + 15) / 16 * 16;
		float *d = bp + (long)j0 * k;
		if (tb)
			// A transpose, in blocks of 64 rows of the panel (at most 16 KiB) so that each
			// line written stays in L1 for all 16 of its writes: column after column over
			// the whole panel, a long k (a convolution's filter gradient over the batch's
			// pixels, k = 16384) evicted each line between writes.
			for (int k0 = 0; k0 < k; k0 += 64) {
				int ke = k - k0 < 64 ? k : k0 + 64;
				for (int j = 0; j < np; j++)
					for (int kk = k0; kk < ke; kk++) d[(long)kk * np + j] = j < nb ? b[(long)(j0 + j) * ldb + kk] : 0;
			}
		else
			for (int kk = 0; kk < k; kk++)
				for (int j = 0; j < np; j++) d[(long)kk * np + j] = j < nb ? b[(long)kk * ldb + j0 + j] : 0;
	}
	for (int i0 = 0; i0 < m; i0 += GP5R_MB) {
		int ie = m - i0 < GP5R_MB ? m : i0 + GP5R_MB;
		// The next chunk's rows of a, prefetched into L2 one line a step in the first steps of
		// this chunk's micro-kernel calls, when they are at most 96 KiB (k <= 384): loaded on
		// demand they kept the tall products of swin_t's first two stages waiting on memory;
		// larger ones (the convolutions' k >= 576) compete in L2 with the packed panels.
		long nxr = k <= 384 ? (m - ie < GP5R_MB ? m - ie : GP5R_MB) : 0;
		const char *pfp = (const char *)(a + (long)ie * lda);
		long pfl = nxr > 0 ? (nxr * lda * 4 + 63) / 64 : 0;
		long calls = (long)((GP5R_MB + 7) / 8) * ((n + NB - 1) / NB) * ((k + GP5R_KC - 1) / GP5R_KC);
		long per = (pfl + calls - 1) / calls;
		for (int j0 = 0; j0 < n; j0 += NB) {
			int nb = n - j0 < NB ? n - j0 : NB, np = (nb + 15) / 16 * 16, nv = np / 16;
			__mmask16 last = nb == np ? 0xffff : (__mmask16)((1u << (nb % 16)) - 1);
			for (int k0 = 0; k0 < k; k0 += GP5R_KC) {
				int kc = k - k0 < GP5R_KC ? k - k0 : GP5R_KC;
				const float *bpk = bp + (long)j0 * k + (long)k0 * np;
				const float *bj = bias && k0 + kc == k ? bias + j0 : 0;
				int load = k0 > 0 || add, i = i0;
#define GP5R(MR, NV)                                                                                              \
	do {                                                                                                      \
		long t = MR == 1 ? 0 : pfl < per ? pfl : per;                                                     \
		if (t)                                                                                            \
			gp5r_micro(MR, NV, np, kc, a + (long)i * lda + k0, lda, bpk, c + (long)i * ldc + j0, ldc, load, bj, last, 1, pfp, t); \
		else                                                                                              \
			gp5r_micro(MR, NV, np, kc, a + (long)i * lda + k0, lda, bpk, c + (long)i * ldc + j0, ldc, load, bj, last, 0, 0, 0); \
		pfp += 64 * t;                                                                                    \
		pfl -= t;                                                                                         \
	} while (0)
				switch (nv) {
				case 4:
					for (; i + 6 <= ie; i += 6) GP5R(6, 4);
					for (; i < ie; i++) GP5R(1, 4);
					break;
				case 3:
					for (; i + 8 <= ie; i += 8) GP5R(8, 3);
					for (; i < ie; i++) GP5R(1, 3);
					break;
				case 2:
					for (; i + 8 <= ie; i += 8) GP5R(8, 2);
					for (; i < ie; i++) GP5R(1, 2);
					break;
				default:
					for (; i + 8 <= ie; i += 8) GP5R(8, 1);
					for (; i < ie; i++) GP5R(1, 1);
				}
#undef GP5R
			}
		}
	}
	return 1;
}

#pragma GCC pop_options
