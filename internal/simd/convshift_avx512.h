// AVX-512 kernels of the implicit convolution (convshift_cgo.go): a convolution computed from
// its input directly, without the im2col matrix. Row r = c·kk + q of the matrix im2col would
// build is a plane of the input read at tap q's offset, the pixels in the padding masked off
// by 16-lane masks (gp_shiftconv, convshift.h); each kernel loads those 16 pixels straight
// from the input where it needs them. Compiled for AVX-512 by the pragma below and called
// only at level AVX512 (level.go). The sums are the same bits as convshift_avx2.h's.

#include <immintrin.h>
#include "convshift.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#pragma GCC optimize("fp-contract=off")

// gp5s_tail is the lane mask of the first n of 16 lanes.
static inline __mmask16 gp5s_tail(long n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

// gp5s_hsum is the sum of v's 16 lanes in the order of GCC's _mm512_reduce_add_ps, written out
// so that convshift_avx2.h's gp2s_hsum can repeat it: the upper eight lanes plus the lower,
// then the upper four plus the lower, then lanes (2,3) onto (0,1), then lane 1 onto 0.
static inline float gp5s_hsum(__m512 v) {
	__m256 h = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
	__m128 a = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
	__m128 b = _mm_add_ps(a, _mm_shuffle_ps(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
	__m128 c = _mm_add_ps(b, _mm_shuffle_ps(b, b, _MM_SHUFFLE(2, 3, 0, 1)));
	return _mm_cvtss_f32(c);
}

// gp5s_fwd_block computes output channels [o0, o0+NO) of units u[0..NV), a unit being 16
// pixels of one image (its chunk j of ceil(P/16)): acc = Σ_r wp[r·O + o]·x[row r, k] in the
// order of r, then + bias[o] when bias is not NULL. The accumulators are named variables
// (a<o><v>), not an array: GCC at -O3 keeps an array of them in registers but also stores
// it to the stack on every iteration.
#define GP5S_FMA(o)                                                                     \
	if (NO > o) {                                                                       \
		__m512 w = _mm512_set1_ps(wr[o]);                                               \
		a##o##0 = _mm512_fmadd_ps(w, x0, a##o##0);                                      \
		if (NV > 1) a##o##1 = _mm512_fmadd_ps(w, x1, a##o##1);                          \
		if (NV > 2) a##o##2 = _mm512_fmadd_ps(w, x2, a##o##2);                          \
	}
#define GP5S_ST1(o, v)                                                                  \
	{                                                                                   \
		__m512 r = a##o##v;                                                             \
		if (bias) r = _mm512_add_ps(r, _mm512_set1_ps(bias[o0 + o]));                   \
		_mm512_mask_storeu_ps(y##v + (long)(o0 + o) * yc, t##v, r);                     \
	}
#define GP5S_ST(o)                                                                      \
	if (NO > o) {                                                                       \
		GP5S_ST1(o, 0)                                                                  \
		if (NV > 1) GP5S_ST1(o, 1)                                                      \
		if (NV > 2) GP5S_ST1(o, 2)                                                      \
	}
static inline __attribute__((always_inline)) void gp5s_fwd_block(int PAD, int NO, int NV, const gp_shiftconv *g,
                                                                 const long *un, const long *uj, const float *x,
                                                                 const float *wp, const float *bias, float *y,
                                                                 int o0) {
	const int C = g->C, O = g->O, kk = g->kk;
	const long P = g->P, xc = g->xc, yc = g->yc, nch = (P + 15) / 16;
	const int *qoff = g->qoff;
	const __m512 z = _mm512_setzero_ps();
	__m512 a00 = z, a01 = z, a02 = z, a10 = z, a11 = z, a12 = z, a20 = z, a21 = z, a22 = z, a30 = z, a31 = z,
	       a32 = z, a40 = z, a41 = z, a42 = z, a50 = z, a51 = z, a52 = z, a60 = z, a61 = z, a62 = z, a70 = z,
	       a71 = z, a72 = z;
	// Unit v's pixels of channel 0 and its masks (mask row q at m<v>[q·nch]); from padded
	// planes (PAD), its line's first pixel, read with plain loads.
#define GP5S_XB(v) (PAD ? x + un[v] * (long)C * g->pp + (uj[v] * 16 / g->ow) * g->lw + (uj[v] * 16) % g->ow \
	                : x + un[v] * g->xn + uj[v] * 16)
	const float *xb0 = GP5S_XB(0), *xb1 = xb0, *xb2 = xb0;
	const unsigned short *m0 = PAD ? 0 : g->mask + uj[0], *m1 = m0, *m2 = m0;
	if (NV > 1) xb1 = GP5S_XB(1), m1 = PAD ? 0 : g->mask + uj[1];
	if (NV > 2) xb2 = GP5S_XB(2), m2 = PAD ? 0 : g->mask + uj[2];
#undef GP5S_XB
	const long cst = PAD ? g->pp : xc;
	const int *qo = PAD ? g->poff : qoff;
	const float *wr = wp + o0;
	for (int c = 0; c < C; c++) {
		for (int q = 0; q < kk; q++, wr += O) {
			long off = (long)c * cst + qo[q], mo = (long)q * nch;
			__m512 x0, x1, x2;
			if (PAD) {
				x0 = _mm512_loadu_ps(xb0 + off), x1 = x0, x2 = x0;
				if (NV > 1) x1 = _mm512_loadu_ps(xb1 + off);
				if (NV > 2) x2 = _mm512_loadu_ps(xb2 + off);
			} else {
				x0 = _mm512_maskz_loadu_ps(m0[mo], xb0 + off), x1 = x0, x2 = x0;
				if (NV > 1) x1 = _mm512_maskz_loadu_ps(m1[mo], xb1 + off);
				if (NV > 2) x2 = _mm512_maskz_loadu_ps(m2[mo], xb2 + off);
			}
			GP5S_FMA(0) GP5S_FMA(1) GP5S_FMA(2) GP5S_FMA(3) GP5S_FMA(4) GP5S_FMA(5) GP5S_FMA(6) GP5S_FMA(7)
		}
	}
	float *y0 = y + un[0] * g->yn + uj[0] * 16, *y1 = y0, *y2 = y0;
	__mmask16 t0 = gp5s_tail(P - uj[0] * 16), t1 = t0, t2 = t0;
	if (NV > 1) y1 = y + un[1] * g->yn + uj[1] * 16, t1 = gp5s_tail(P - uj[1] * 16);
	if (NV > 2) y2 = y + un[2] * g->yn + uj[2] * 16, t2 = gp5s_tail(P - uj[2] * 16);
	GP5S_ST(0) GP5S_ST(1) GP5S_ST(2) GP5S_ST(3) GP5S_ST(4) GP5S_ST(5) GP5S_ST(6) GP5S_ST(7)
}

#define GP5S_FWD_O(NV)                                                                   \
	do {                                                                                 \
		int o0 = 0;                                                                      \
		for (; o0 + 8 <= O; o0 += 8) gp5s_fwd_block(PAD, 8, NV, g, un, uj, x, wp, bias, y, o0); \
		switch (O - o0) {                                                                \
		case 7: gp5s_fwd_block(PAD, 7, NV, g, un, uj, x, wp, bias, y, o0); break;            \
		case 6: gp5s_fwd_block(PAD, 6, NV, g, un, uj, x, wp, bias, y, o0); break;            \
		case 5: gp5s_fwd_block(PAD, 5, NV, g, un, uj, x, wp, bias, y, o0); break;            \
		case 4: gp5s_fwd_block(PAD, 4, NV, g, un, uj, x, wp, bias, y, o0); break;            \
		case 3: gp5s_fwd_block(PAD, 3, NV, g, un, uj, x, wp, bias, y, o0); break;            \
		case 2: gp5s_fwd_block(PAD, 2, NV, g, un, uj, x, wp, bias, y, o0); break;            \
		case 1: gp5s_fwd_block(PAD, 1, NV, g, un, uj, x, wp, bias, y, o0); break;            \
		}                                                                                \
	} while (0)

// gp5s_fwd_units is the forward of units [u0, u1) (unit u: image u/nch, pixels 16·(u%nch)
// on): y = wpᵀ·cols(x) (+ bias), wp the weights packed K×O (K = C·kk rows in im2col's
// order), three units and eight output channels at a time; x as planes with masks, or
// padded planes (PAD).
static inline __attribute__((always_inline)) void gp5s_fwd_units(int PAD, const gp_shiftconv *g, const float *x,
                                                                 const float *wp, const float *bias, float *y,
                                                                 long u0, long u1) {
	const int O = g->O;
	long nch = (g->P + 15) / 16;
	long un[3], uj[3];
	long u = u0;
	for (; u + 3 <= u1; u += 3) {
		for (int v = 0; v < 3; v++) un[v] = (u + v) / nch, uj[v] = (u + v) % nch;
		GP5S_FWD_O(3);
	}
	if (u1 - u == 2) {
		for (int v = 0; v < 2; v++) un[v] = (u + v) / nch, uj[v] = (u + v) % nch;
		GP5S_FWD_O(2);
	} else if (u1 - u == 1) {
		un[0] = u / nch, uj[0] = u % nch;
		GP5S_FWD_O(1);
	}
}

// gp5_conv_shift_fwd is gp5s_fwd_units reading x through the masks.
static void gp5_conv_shift_fwd(const gp_shiftconv *g0, const int *qoff, const unsigned short *mask, const float *x, const float *wp, const float *bias, float *y,
                               long u0, long u1) {
	gp_shiftconv gs = *g0;
	gs.qoff = qoff, gs.mask = mask;
	gp5s_fwd_units(0, &gs, x, wp, bias, y, u0, u1);
}

// gp5_conv_shift_fwd_pad is gp5s_fwd_units reading padded planes xp (lines of ow pixels, a
// multiple of 16, lw apart, planes of pp, tap q at poff[q]) with plain loads: the same
// products in the same order as gp5_conv_shift_fwd's, so the same bits, without a vector
// ALU micro-op for each masked load.
static void gp5_conv_shift_fwd_pad(const gp_shiftconv *g0, const int *poff, long ow, long lw, long pp, const float *xp,
                                   const float *wp, const float *bias, float *y, long u0, long u1) {
	gp_shiftconv gs = *g0;
	gs.poff = poff, gs.ow = ow, gs.lw = lw, gs.pp = pp;
	gp5s_fwd_units(1, &gs, xp, wp, bias, y, u0, u1);
}

// gp5s_wgrad_block sums output channels [o0, o0+NO) by rows [r0, r0+NR) of the filter
// gradient over the N images: lane t of accumulator a<o><r> adds dy[n, o, k]·x[row r, k] for
// the pixels k ≡ t (mod 16), images and chunks in order; dw[o·K + r] is then the lanes'
// gp5s_hsum. dy is N×O×P. Named accumulators, as in gp5s_fwd_block.
//
// A step (16 pixels of one image) takes NO·NR FMAs and reads x either through the masks
// with zero-masked loads, or (PAD) from padded planes (gp_pad_planes) with plain loads, the
// padding's zeros in the planes: row r of chunk j (line h, from column w0; OW a multiple of
// 16) at n·C·pp + c·pp + poff[q] + h·lw + w0. The same products in the same order, so the
// same bits. dy is read with plain loads but for the last chunk when P is not a multiple of
// 16, zero-masked past P.
//
// Per FLOP this runs at 0.6-0.75 of gp5s_fwd_block's rate on 14x14 and 7x7 maps and 0.8 on 4x4
// (BenchmarkConvShiftDemo: resnet8_s2's layers at batch 64). A masked step's six x loads are
// zero-masked and its six masks moved into mask registers, each a micro-op on the two ports of
// the FMAs: 24 FMAs and 12 more micro-ops where the forward's 24 take 6 more; a loop of that
// mix alone, in L1, takes 1.2x the forward's time (with 4x4 maps, masks kept in registers and
// dy's loads masked, 1.0x). Each block streams the whole batch's dy and x through the caches,
// which at batch 64 leaves them in L2, not L1: merge-masked FMAs over plain loads of x (no
// masked loads; the same bits while dy is finite) gained 1.15-1.2x with the batch in L1 (8
// images) and nothing at 64. And with 64 channels of 4x4, the images lie 4 KiB apart in dy, so
// a block's 64 images share their L1 sets: with one chunk an image, gp5s_wgrad copies the
// block's channels of dy, image after image, to db (the same values, so the same bits), which
// measured 1.27-1.42x against reading dy in place on resnet8_s2's 4x4 layers.
#define GP5S_WO(o, r) \
	if (NO > o) a##o##r = _mm512_fmadd_ps(d##o, xv, a##o##r);
#define GP5S_WR(r, PAD, ONE)                                                                               \
	if (NR > r) {                                                                                      \
		if (!PAD && !ONE) k##r = mask[mq##r + j];                                                  \
		__m512 xv = PAD ? _mm512_loadu_ps(xr + off##r) : _mm512_maskz_loadu_ps(k##r, xr + off##r); \
		GP5S_WO(0, r) GP5S_WO(1, r) GP5S_WO(2, r) GP5S_WO(3, r)                                    \
	}
#define GP5S_WD(o, TAIL) \
	if (NO > o) d##o = TAIL ? _mm512_maskz_loadu_ps(tm, dr + (long)o * P) : _mm512_loadu_ps(dr + (long)o * P);
#define GP5S_WSTEP(PAD, TAIL, ONE)                                                  \
	{                                                                           \
		__m512 d0 = z, d1 = z, d2 = z, d3 = z;                              \
		GP5S_WD(0, TAIL) GP5S_WD(1, TAIL) GP5S_WD(2, TAIL) GP5S_WD(3, TAIL) \
		GP5S_WR(0, PAD, ONE) GP5S_WR(1, PAD, ONE) GP5S_WR(2, PAD, ONE)      \
		GP5S_WR(3, PAD, ONE) GP5S_WR(4, PAD, ONE) GP5S_WR(5, PAD, ONE)      \
	}
// GP5S_WIMG runs the steps of the N images in order, an image's chunks in order: the full
// chunks, then the partial one (TAIL) if P is not a multiple of 16.
#define GP5S_WIMG(PAD, TAIL)                                                                                    \
	for (int n = 0; n < N; n++) {                                                                           \
		const float *xb = x + (long)n * xnst, *dr = dy + ((long)n * O + o0) * P;                        \
		long j = 0;                                                                                     \
		for (; j < nfull; j++, dr += 16) {                                                              \
			const float *xr = PAD ? xb + (j * 16 / g->ow) * g->lw + (j * 16) % g->ow : xb + j * 16; \
			GP5S_WSTEP(PAD, 0, 0)                                                                   \
		}                                                                                               \
		if (TAIL) {                                                                                     \
			const float *xr = xb + j * 16;                                                          \
			GP5S_WSTEP(PAD, 1, 0)                                                                   \
		}                                                                                               \
	}
#define GP5S_WS1(o, r) \
	if (NR > r) dw[(long)(o0 + o) * K + r0 + r] = gp5s_hsum(a##o##r);
#define GP5S_WS(o) \
	if (NO > o) { GP5S_WS1(o, 0) GP5S_WS1(o, 1) GP5S_WS1(o, 2) GP5S_WS1(o, 3) GP5S_WS1(o, 4) GP5S_WS1(o, 5) }
// Row r's offset in an image (its channel's plane at its tap's offset) and its mask row.
#define GP5S_WOFF(r) \
	if (NR > r) off##r = (long)((r0 + r) / kk) * cst + qo[(r0 + r) % kk], mq##r = (long)((r0 + r) % kk) * nch;
#define GP5S_WK(r) \
	if (NR > r) k##r = mask[mq##r];
static inline __attribute__((always_inline)) void gp5s_wgrad_block(int PAD, int NO, int NR, const gp_shiftconv *g,
                                                                   const float *x, const float *dy, float *dw,
                                                                   int N, int o0, int r0, const float *db) {
	const int O = g->O, kk = g->kk;
	const long P = g->P, nch = (P + 15) / 16, nfull = P / 16;
	const long xnst = PAD ? (long)g->C * g->pp : g->xn, cst = PAD ? g->pp : g->xc;
	const int *qo = PAD ? g->poff : g->qoff;
	const unsigned short *mask = g->mask;
	const __mmask16 tm = gp5s_tail(P - (nch - 1) * 16); // the last chunk's pixels
	const __m512 z = _mm512_setzero_ps();
	__m512 a00 = z, a01 = z, a02 = z, a03 = z, a04 = z, a05 = z, a10 = z, a11 = z, a12 = z, a13 = z, a14 = z,
	       a15 = z, a20 = z, a21 = z, a22 = z, a23 = z, a24 = z, a25 = z, a30 = z, a31 = z, a32 = z, a33 = z,
	       a34 = z, a35 = z;
	long off0 = 0, off1 = 0, off2 = 0, off3 = 0, off4 = 0, off5 = 0;
	long mq0 = 0, mq1 = 0, mq2 = 0, mq3 = 0, mq4 = 0, mq5 = 0;
	__mmask16 k0 = 0xffff, k1 = k0, k2 = k0, k3 = k0, k4 = k0, k5 = k0;
	GP5S_WOFF(0) GP5S_WOFF(1) GP5S_WOFF(2) GP5S_WOFF(3) GP5S_WOFF(4) GP5S_WOFF(5)
	if (PAD) {
		GP5S_WIMG(1, 0)
	} else if (nch == 1) {
		// One chunk per image (4x4 maps): the masks hold for every image, so they stay in
		// mask registers, and dy is read through the tail's.
		GP5S_WK(0) GP5S_WK(1) GP5S_WK(2) GP5S_WK(3) GP5S_WK(4) GP5S_WK(5)
		const long j = 0;
		if (db) {
			// dy's channels [o0, o0+4) in db, image after image, 16 floats each: P, the
			// channel stride GP5S_WD reads dy at, is 16 there.
			const float *xr = x, *dr = db;
			const long P = 16;
			for (int n = 0; n < N; n++, xr += xnst, dr += 4 * 16) GP5S_WSTEP(0, 1, 1)
		} else {
			const float *xr = x, *dr = dy + (long)o0 * P;
			for (int n = 0; n < N; n++, xr += xnst, dr += (long)O * P) GP5S_WSTEP(0, 1, 1)
		}
	} else if (nfull < nch) {
		GP5S_WIMG(0, 1)
	} else {
		GP5S_WIMG(0, 0)
	}
	long K = (long)g->C * kk;
	GP5S_WS(0) GP5S_WS(1) GP5S_WS(2) GP5S_WS(3)
}

#define GP5S_WGRAD_R(NO)                                                                            \
	do {                                                                                        \
		int r0 = 0;                                                                         \
		for (; r0 + 6 <= K; r0 += 6) gp5s_wgrad_block(PAD, NO, 6, g, x, dy, dw, N, o0, r0, db); \
		switch (K - r0) {                                                                   \
		case 5: gp5s_wgrad_block(PAD, NO, 5, g, x, dy, dw, N, o0, r0, db); break;               \
		case 4: gp5s_wgrad_block(PAD, NO, 4, g, x, dy, dw, N, o0, r0, db); break;               \
		case 3: gp5s_wgrad_block(PAD, NO, 3, g, x, dy, dw, N, o0, r0, db); break;               \
		case 2: gp5s_wgrad_block(PAD, NO, 2, g, x, dy, dw, N, o0, r0, db); break;               \
		case 1: gp5s_wgrad_block(PAD, NO, 1, g, x, dy, dw, N, o0, r0, db); break;               \
		}                                                                                   \
	} while (0)

// gp5s_wgrad is the filter gradient's rows [oa, ob): dw (O×K, K = C·kk) = dy·cols(x)ᵀ summed
// over the N images, dy N×O×P; four output channels by six rows at a time, x as planes with
// masks or padded planes (PAD). With one chunk an image and at most 128 images, each four
// output channels of dy are first copied to dbuf (gp5s_wgrad_block's db), 0 past P.
static inline __attribute__((always_inline)) void gp5s_wgrad(int PAD, const gp_shiftconv *g, const float *x,
                                                             const float *dy, float *dw, int N, int oa, int ob) {
	int K = g->C * g->kk;
	int o0 = oa;
	float dbuf[128 * 4 * 16] __attribute__((aligned(64))); // 32 KiB
	const int cp = !PAD && g->P <= 16 && N <= 128;
	const float *db = 0;
	for (; o0 + 4 <= ob; o0 += 4) {
		if (cp) {
			const __mmask16 tm = gp5s_tail(g->P);
			for (int n = 0; n < N; n++)
				for (int o = 0; o < 4; o++)
					_mm512_store_ps(dbuf + (n * 4 + o) * 16, _mm512_maskz_loadu_ps(tm, dy + ((long)n * g->O + o0 + o) * g->P));
			db = dbuf;
		}
		GP5S_WGRAD_R(4);
	}
	db = 0;
	switch (ob - o0) {
	case 3: GP5S_WGRAD_R(3); break;
	case 2: GP5S_WGRAD_R(2); break;
	case 1: GP5S_WGRAD_R(1); break;
	}
}

// gp5_conv_shift_wgrad is the filter gradient's rows [oa, ob) with x read through the masks
// (gp5s_wgrad).
static void gp5_conv_shift_wgrad(const gp_shiftconv *g0, const int *qoff, const unsigned short *mask, const float *x,
                                 const float *dy, float *dw, int N, int oa, int ob) {
	gp_shiftconv gs = *g0;
	gs.qoff = qoff, gs.mask = mask;
	gp5s_wgrad(0, &gs, x, dy, dw, N, oa, ob);
}

// gp5_conv_shift_wgrad_pad is gp5_conv_shift_wgrad's rows [oa, ob) read from padded planes
// xp (lines of ow pixels, a multiple of 16, lw apart, planes of pp, tap q at poff[q]) with
// plain loads: the same products in the same order, so the same bits, without a mask.
static void gp5_conv_shift_wgrad_pad(const gp_shiftconv *g0, const int *poff, long ow, long lw, long pp,
                                     const float *xp, const float *dy, float *dw, int N, int oa, int ob) {
	gp_shiftconv gs = *g0;
	gs.poff = poff, gs.ow = ow, gs.lw = lw, gs.pp = pp;
	gp5s_wgrad(1, &gs, xp, dy, dw, N, oa, ob);
}

#pragma GCC pop_options
