// AVX2+FMA kernels of the implicit convolution (convshift_cgo.go), the twins of
// convshift_avx512.h's: same signatures, same bits. A unit's 16 pixels are two eight-lane
// halves; the filter gradient sums each half on its own (sixteen lanes in all, as at
// AVX-512) and adds the lanes in gp5s_hsum's order. Compiled for AVX2 and FMA by the pragma
// below and called only at level AVX2 (level.go).

#include <immintrin.h>
#include "avx2_common.h"
#include "convshift.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")

// gp2s_hsum is gp5s_hsum of the 16 lanes (lo, hi).
static inline float gp2s_hsum(__m256 lo, __m256 hi) {
	__m256 h = _mm256_add_ps(hi, lo);
	__m128 a = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
	__m128 b = _mm_add_ps(a, _mm_shuffle_ps(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
	__m128 c = _mm_add_ps(b, _mm_shuffle_ps(b, b, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtss_f32(c);
}

// gp2s_fwd_block is gp5f_block for one unit (image n, chunk j) and output channels [o0,
// o0+NO).
static inline __attribute__((always_inline)) void gp2s_fwd_block(int NO, const gp_shiftconv *g, long n, long j,
                                                                 const float *x, const float *wp, const float *bias,
                                                                 float *y, int o0) {
	const int C = g->C, O = g->O, kk = g->kk;
	const long P = g->P, xc = g->xc, yc = g->yc, nch = (P + 15) / 16;
	const int *qoff = g->qoff;
	__m256 lo[6], hi[6];
	for (int o = 0; o < NO; o++) lo[o] = hi[o] = _mm256_setzero_ps();
	const float *xb = x + n * g->xn + j * 16;
	const float *wr = wp + o0;
	for (int c = 0; c < C; c++) {
		for (int q = 0; q < kk; q++, wr += O) {
			const float *s = xb + (long)c * xc + qoff[q];
			__m256i ml, mh;
			gp2v_bits16(g->mask[(long)q * nch + j], &ml, &mh);
			__m256 xl = _mm256_maskload_ps(s, ml), xh = _mm256_maskload_ps(s + 8, mh);
			for (int o = 0; o < NO; o++) {
				__m256 w = _mm256_broadcast_ss(wr + o);
				lo[o] = _mm256_fmadd_ps(w, xl, lo[o]);
				hi[o] = _mm256_fmadd_ps(w, xh, hi[o]);
			}
		}
	}
	long rem = P - j * 16;
	float *yb = y + n * g->yn + j * 16;
	for (int o = 0; o < NO; o++) {
		__m256 l = lo[o], h = hi[o];
		if (bias) {
			__m256 b = _mm256_set1_ps(bias[o0 + o]);
			l = _mm256_add_ps(l, b);
			h = _mm256_add_ps(h, b);
		}
		float *d = yb + (long)(o0 + o) * yc;
		if (rem >= 16) {
			_mm256_storeu_ps(d, l);
			_mm256_storeu_ps(d + 8, h);
		} else if (rem >= 8) {
			_mm256_storeu_ps(d, l);
			gp2v_stp(d + 8, h, rem - 8);
		} else {
			gp2v_stp(d, l, rem);
		}
	}
}

// gp2_conv_shift_fwd is gp5_conv_shift_fwd: one unit and six output channels at a time.
static void gp2_conv_shift_fwd(const gp_shiftconv *g0, const int *qoff, const unsigned short *mask, const float *x, const float *wp, const float *bias, float *y,
                               long u0, long u1) {
	gp_shiftconv gs = *g0;
	gs.qoff = qoff, gs.mask = mask;
	const gp_shiftconv *g = &gs;
	const int O = g->O;
	long nch = (g->P + 15) / 16;
	for (long u = u0; u < u1; u++) {
		long n = u / nch, j = u % nch;
		int o0 = 0;
		for (; o0 + 6 <= O; o0 += 6) gp2s_fwd_block(6, g, n, j, x, wp, bias, y, o0);
		switch (O - o0) {
		case 5: gp2s_fwd_block(5, g, n, j, x, wp, bias, y, o0); break;
		case 4: gp2s_fwd_block(4, g, n, j, x, wp, bias, y, o0); break;
		case 3: gp2s_fwd_block(3, g, n, j, x, wp, bias, y, o0); break;
		case 2: gp2s_fwd_block(2, g, n, j, x, wp, bias, y, o0); break;
		case 1: gp2s_fwd_block(1, g, n, j, x, wp, bias, y, o0); break;
		}
	}
}

// gp2s_wgrad_half sums half hf (0: lanes 0-7, 1: lanes 8-15) of gp5s_wgrad_block's lanes for
// output channels [o0, o0+NO) by rows [r0, r0+NR) into acc.
static inline __attribute__((always_inline)) void gp2s_wgrad_half(int NO, int NR, int hf, const gp_shiftconv *g,
                                                                  const float *x, const float *dy, int N, int o0,
                                                                  int r0, __m256 acc[2][5]) {
	const int O = g->O, kk = g->kk;
	const long P = g->P, nch = (P + 15) / 16;
	long off[5];
	int mq[5];
	for (int r = 0; r < NR; r++) {
		int c = (r0 + r) / kk, q = (r0 + r) % kk;
		off[r] = (long)c * g->xc + g->qoff[q] + 8 * hf;
		mq[r] = q;
		for (int o = 0; o < NO; o++) acc[o][r] = _mm256_setzero_ps();
	}
	for (int n = 0; n < N; n++) {
		const float *xn = x + (long)n * g->xn, *dyn = dy + ((long)n * O + o0) * P + 8 * hf;
		for (long j = 0; j < nch; j++) {
			long rem = P - j * 16 - 8 * hf;
			if (rem <= 0) continue; // no pixel: every product would be 0
			__m256i tm = gp2v_m8(rem);
			__m256 d[2];
			for (int o = 0; o < NO; o++) d[o] = _mm256_maskload_ps(dyn + (long)o * P + j * 16, tm);
			for (int r = 0; r < NR; r++) {
				__m256 xv = _mm256_maskload_ps(xn + off[r] + j * 16, gp2v_bits(g->mask[(long)mq[r] * nch + j] >> (8 * hf)));
				for (int o = 0; o < NO; o++) acc[o][r] = _mm256_fmadd_ps(d[o], xv, acc[o][r]);
			}
		}
	}
}

// gp2s_wgrad_block is gp5s_wgrad_block, one half of the lanes after the other.
static inline __attribute__((always_inline)) void gp2s_wgrad_block(int NO, int NR, const gp_shiftconv *g,
                                                                   const float *x, const float *dy, float *dw,
                                                                   int N, int o0, int r0) {
	__m256 lo[2][5], hi[2][5];
	gp2s_wgrad_half(NO, NR, 0, g, x, dy, N, o0, r0, lo);
	gp2s_wgrad_half(NO, NR, 1, g, x, dy, N, o0, r0, hi);
	long K = (long)g->C * g->kk;
	for (int o = 0; o < NO; o++)
		for (int r = 0; r < NR; r++) dw[(long)(o0 + o) * K + r0 + r] = gp2s_hsum(lo[o][r], hi[o][r]);
}

#define GP2S_WGRAD_R(NO)                                                              \
	do {                                                                              \
		int r0 = 0;                                                                   \
		for (; r0 + 5 <= K; r0 += 5) gp2s_wgrad_block(NO, 5, g, x, dy, dw, N, o0, r0); \
		switch (K - r0) {                                                             \
		case 4: gp2s_wgrad_block(NO, 4, g, x, dy, dw, N, o0, r0); break;             \
		case 3: gp2s_wgrad_block(NO, 3, g, x, dy, dw, N, o0, r0); break;             \
		case 2: gp2s_wgrad_block(NO, 2, g, x, dy, dw, N, o0, r0); break;             \
		case 1: gp2s_wgrad_block(NO, 1, g, x, dy, dw, N, o0, r0); break;             \
		}                                                                             \
	} while (0)

// gp2_conv_shift_wgrad is gp5_conv_shift_wgrad: two output channels by five rows at a time.
static void gp2_conv_shift_wgrad(const gp_shiftconv *g0, const int *qoff, const unsigned short *mask, const float *x, const float *dy, float *dw, int N, int oa,
                                 int ob) {
	gp_shiftconv gs = *g0;
	gs.qoff = qoff, gs.mask = mask;
	const gp_shiftconv *g = &gs;
	int K = g->C * g->kk;
	int o0 = oa;
	for (; o0 + 2 <= ob; o0 += 2) GP2S_WGRAD_R(2);
	if (o0 < ob) GP2S_WGRAD_R(1);
}

#pragma GCC pop_options
