// AVX-512 kernels of the implicit convolution (convshift_cgo.go): a convolution computed from
// its input directly, without the im2col matrix. Row r = c·kk + q of the matrix im2col would
// build is a plane of the input read at tap q's offset, the pixels in the padding masked off
// by 16-lane masks (gp_shiftconv, convshift.h); each kernel loads those 16 pixels straight
// from the input where it needs them. Compiled for AVX-512 by the pragma below and called
// only at level AVX512 (level.go). The sums are the same bits as convshift_avx2.h's. The
// forward is convshift_fwd_avx512.h's.

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

// gp5s_wgrad_block sums output channels [o0, o0+NO) by rows [r0, r0+NR) of the filter
// gradient over units [ua, ub) of the batch's nu = N·ceil(P/16) (unit u: 16 pixels of image
// u/nch, its chunk u%nch): lane t of accumulator a<o><r> adds dy[n, o, k]·x[row r, k] for the
// pixels k ≡ t (mod 16), units in order. The lanes start at 0 (ua = 0) or from ab (16 floats
// for each o·6 + r), where the units before ua left them; they are left in ab (ub < nu) or
// their gp5s_hsum written to dw[o·K + r] (ub = nu). dy is N×O×P. Named accumulators, as in
// gp5f_block (convshift_fwd_avx512.h). Whatever the split into unit ranges, each lane's sum
// has the same terms in the same order: the same bits.
//
// A step (16 pixels of one image) takes NO·NR FMAs and reads x in one of four modes:
//   0: through the masks, zero-masked loads (the definition: a pixel in the padding adds
//      dy·0). Each is a vector ALU micro-op on the two ports of the FMAs, as is the move of
//      its mask into a mask register: 24 FMAs and 12 more micro-ops a step, where the
//      forward's masked path takes 6 more (its plain-load path in gp5f_block none: its
//      masks are loaded from memory, by the load ports).
//   1: plain loads and merge-masked FMAs: a pixel in the padding leaves its lane's sum as
//      it is, where mode 0 adds dy·0, and the mask moves are the only extra micro-ops. The
//      same bits while dy is finite: a lane starts at +0, and an FMA's sum is -0 only from
//      -0 + -0, so no lane is ever -0 and adding ±0 leaves it as it is; x's values in the
//      padding's lanes never count. Taken for the images [nlo, nhi) (gp5s_wgrad_fast) where
//      gp5s_wgrad_plan takes it.
//   2: padded planes (PAD, gp_pad_planes): plain loads, plain FMAs, the padding's zeros in
//      the planes; row r of chunk j (line h, from column w0; OW a multiple of 16) is read at
//      n·C·pp + c·pp + poff[q] + h·lw + w0.
//   3: plain loads, plain FMAs, where no full chunk of any tap reads the padding (1x1 without
//      padding: every mask 0xffff, so the loads of mode 0 with the masks, and its bits, at
//      any dy); a partial last chunk runs in mode 0.
// dy is read with plain loads but for the last chunk when P is not a multiple of 16,
// zero-masked past P. With one chunk an image (4x4 maps) the masks are the same for every
// step and stay in mask registers (mode 0), and dy is read from db, a copy of its channels
// [o0, o0+NO) for the images [ua, ub) (gp5s_wgrad).
#define GP5S_WO(o, r, MODE) \
	if (NO > o) a##o##r = MODE == 1 ? _mm512_mask3_fmadd_ps(d##o, xv, a##o##r, k##r) : _mm512_fmadd_ps(d##o, xv, a##o##r);
#define GP5S_WR(r, MODE, HOIST)                                                                          \
	if (NR > r) {                                                                                    \
		if (MODE < 2 && !HOIST) k##r = mask[mq##r + j];                                          \
		__m512 xv = MODE == 0 ? _mm512_maskz_loadu_ps(k##r, xr + off##r) : _mm512_loadu_ps(xr + off##r); \
		GP5S_WO(0, r, MODE) GP5S_WO(1, r, MODE) GP5S_WO(2, r, MODE) GP5S_WO(3, r, MODE)          \
	}
#define GP5S_WD(o, TAIL) \
	if (NO > o) d##o = TAIL ? _mm512_maskz_loadu_ps(tm, dr + (long)o * P) : _mm512_loadu_ps(dr + (long)o * P);
#define GP5S_WSTEP(MODE, TAIL, HOIST)                                               \
	{                                                                           \
		__m512 d0 = z, d1 = z, d2 = z, d3 = z;                              \
		GP5S_WD(0, TAIL) GP5S_WD(1, TAIL) GP5S_WD(2, TAIL) GP5S_WD(3, TAIL) \
		GP5S_WR(0, MODE, HOIST) GP5S_WR(1, MODE, HOIST) GP5S_WR(2, MODE, HOIST) \
		GP5S_WR(3, MODE, HOIST) GP5S_WR(4, MODE, HOIST) GP5S_WR(5, MODE, HOIST) \
	}
// GP5S_WCH runs the steps of image n's chunks [ja, jb) in mode MODE, in order: the full
// chunks, then the partial one (a TAIL step) if jb takes it.
#define GP5S_WCH(MODE, n, ja, jb)                                                                               \
	{                                                                                                       \
		const float *xb = x + (n) * xnst, *dr = dy + ((n) * O + o0) * P + (ja) * 16;                    \
		long j = ja;                                                                                    \
		const long je = (jb) < nfull ? (jb) : nfull;                                                    \
		for (; j < je; j++, dr += 16) {                                                                 \
			const float *xr = MODE == 2 ? xb + (j * 16 / g->ow) * g->lw + (j * 16) % g->ow : xb + j * 16; \
			GP5S_WSTEP(MODE, 0, 0)                                                                  \
		}                                                                                               \
		if (MODE != 2 && j < (jb)) {                                                                    \
			const float *xr = xb + j * 16;                                                          \
			GP5S_WSTEP((MODE == 3 ? 0 : MODE), 1, 0)                                                \
		}                                                                                               \
	}
// GP5S_WIMGS runs images [na, nb) whole in mode MODE; GP5S_WPART image n's chunks [ja, jb)
// in its mode.
#define GP5S_WIMGS(MODE, na, nb) \
	for (long n = na; n < nb; n++) GP5S_WCH(MODE, n, 0, nch)
#define GP5S_WPART(n, ja, jb)                                   \
	{                                                       \
		if (PAD)                                        \
			GP5S_WCH(2, n, ja, jb)                  \
		else if (full)                                  \
			GP5S_WCH(3, n, ja, jb)                  \
		else if ((n) >= nlo && (n) < nhi)               \
			GP5S_WCH(1, n, ja, jb)                  \
		else                                            \
			GP5S_WCH(0, n, ja, jb)                  \
	}
#define GP5S_WS1(o, r) \
	if (NR > r) dw[(long)(o0 + o) * K + r0 + r] = gp5s_hsum(a##o##r);
#define GP5S_WS(o) \
	if (NO > o) { GP5S_WS1(o, 0) GP5S_WS1(o, 1) GP5S_WS1(o, 2) GP5S_WS1(o, 3) GP5S_WS1(o, 4) GP5S_WS1(o, 5) }
#define GP5S_WL1(o, r) \
	if (NR > r) a##o##r = _mm512_load_ps(ab + (o * 6 + r) * 16);
#define GP5S_WL(o) \
	if (NO > o) { GP5S_WL1(o, 0) GP5S_WL1(o, 1) GP5S_WL1(o, 2) GP5S_WL1(o, 3) GP5S_WL1(o, 4) GP5S_WL1(o, 5) }
#define GP5S_WT1(o, r) \
	if (NR > r) _mm512_store_ps(ab + (o * 6 + r) * 16, a##o##r);
#define GP5S_WT(o) \
	if (NO > o) { GP5S_WT1(o, 0) GP5S_WT1(o, 1) GP5S_WT1(o, 2) GP5S_WT1(o, 3) GP5S_WT1(o, 4) GP5S_WT1(o, 5) }
// Row r's offset in an image (its channel's plane at its tap's offset) and its mask row.
#define GP5S_WOFF(r) \
	if (NR > r) off##r = (long)((r0 + r) / kk) * cst + qo[(r0 + r) % kk], mq##r = (long)((r0 + r) % kk) * nch;
#define GP5S_WK(r) \
	if (NR > r) k##r = mask[mq##r];
static inline __attribute__((always_inline)) void gp5s_wgrad_block(int PAD, int NO, int NR, const gp_shiftconv *g,
                                                                   const float *x, const float *dy, float *dw,
                                                                   long nu, int o0, int r0, long ua, long ub,
                                                                   long nlo, long nhi, int full, const float *db, float *ab) {
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
	if (ua > 0) { GP5S_WL(0) GP5S_WL(1) GP5S_WL(2) GP5S_WL(3) }
	if (!PAD && nch == 1) {
		GP5S_WK(0) GP5S_WK(1) GP5S_WK(2) GP5S_WK(3) GP5S_WK(4) GP5S_WK(5)
		const long j = 0;
		const float *xr = x + ua * xnst;
		// db: 16 floats a channel, four channels an image; P, the channel stride GP5S_WD
		// reads dy at, is 16 there.
		const float *dr = db;
		const long P = 16;
		for (long n = ua; n < ub; n++, xr += xnst, dr += 4 * 16) GP5S_WSTEP(0, 1, 1)
	} else {
		// The images whole in [ua, ub) run in loops of one mode each; a part of an image at
		// either end, in its image's mode.
		long n1 = (ua + nch - 1) / nch, n2 = ub / nch;
		if (n1 > n2) { // [ua, ub) inside one image
			const long n = ua / nch;
			GP5S_WPART(n, ua % nch, ub - n * nch)
		} else {
			if (ua < n1 * nch) GP5S_WPART(n1 - 1, ua % nch, nch)
			if (PAD) {
				GP5S_WIMGS(2, n1, n2)
			} else if (full) {
				GP5S_WIMGS(3, n1, n2)
			} else {
				const long l0 = n2 < nlo ? n2 : nlo, l1 = n1 > nlo ? n1 : nlo;
				const long l2 = n2 < nhi ? n2 : nhi, l3 = n1 > nhi ? n1 : nhi;
				GP5S_WIMGS(0, n1, l0)
				GP5S_WIMGS(1, l1, l2)
				GP5S_WIMGS(0, l3, n2)
			}
			if (ub > n2 * nch) GP5S_WPART(n2, 0, ub - n2 * nch)
		}
	}
	const long K = (long)g->C * kk;
	if (ub < nu) {
		GP5S_WT(0) GP5S_WT(1) GP5S_WT(2) GP5S_WT(3)
	} else {
		GP5S_WS(0) GP5S_WS(1) GP5S_WS(2) GP5S_WS(3)
	}
}

#define GP5S_WB(NR) \
	gp5s_wgrad_block(PAD, NO, NR, g, x, dy, dw, nu, o0, r0, ua, ub, nlo, nhi, full, db, abuf + (long)(r0 - rc) * 64)
// gp5s_wgrad_rows runs output channels [o0, o0+NO) by all K rows: rows in spans of rs, and
// for each span the units in groups of gu, each group through the span's blocks of six rows
// (the last block of K fewer).
static inline __attribute__((always_inline)) void gp5s_wgrad_rows(int PAD, int NO, const gp_shiftconv *g,
                                                                  const float *x, const float *dy, float *dw,
                                                                  int N, int o0, long nlo, long nhi, int full, long gu,
                                                                  int rs, float *dbuf, float *abuf) {
	const int K = g->C * g->kk;
	const long P = g->P, nu = (long)N * ((P + 15) / 16);
	const int cp = !PAD && P <= 16;
	for (int rc = 0; rc < K; rc += rs) {
		const int re = rc + rs < K ? rc + rs : K;
		for (long ua = 0; ua < nu; ua += gu) {
			const long ub = ua + gu < nu ? ua + gu : nu;
			const float *db = 0;
			if (cp) {
				const __mmask16 tm = gp5s_tail(P);
				for (long n = ua; n < ub; n++)
					for (int o = 0; o < NO; o++)
						_mm512_store_ps(dbuf + ((n - ua) * 4 + o) * 16,
						                _mm512_maskz_loadu_ps(tm, dy + (n * g->O + o0 + o) * P));
				db = dbuf;
			}
			int r0 = rc;
			for (; r0 + 6 <= re; r0 += 6) GP5S_WB(6);
			switch (re - r0) {
			case 5: GP5S_WB(5); break;
			case 4: GP5S_WB(4); break;
			case 3: GP5S_WB(3); break;
			case 2: GP5S_WB(2); break;
			case 1: GP5S_WB(1); break;
			}
		}
	}
}
#undef GP5S_WB

// The sizes of gp5s_wgrad's groups and of its buffers on the stack: GP5S_WU units a group,
// GP5S_WRS rows a span (abuf: the lanes of four output channels by those rows, 24 KiB), and
// GP5S_WDB images a group of 4x4 maps (dbuf: four channels of dy for each, 32 KiB).
#define GP5S_WU 64
#define GP5S_WRS 96
#define GP5S_WDB 128

// gp5s_wgrad_plan sets how gp5s_wgrad runs the filter gradient of N images: in groups of *gu
// units, the rows in spans of *rs (a group runs through all of a span's blocks of rows, so
// that its dy and x stay in L1 meanwhile, where one pass over the batch for each block read
// them from L2), and reports the mode: 1 where the images in the middle of the batch take
// mode 1 (gp5s_wgrad_fast), 3 where all take mode 3, else 0. Measured at one thread against
// one pass over the batch for each block in mode 0 (the same bits; alternating in one
// process, medians of 9, 3x3 with padding 1): 1.18-1.30x on 7x7 maps of 16-64 channels at
// batch 64, 1.12x on 14x14, 1.09-1.17x on 56x56 of 64 channels at batch 8 and 1.25x at 32,
// 1.04x on 28x28 of 128, 1.13-1.16x on 14x14 of 256, 1.01-1.04x on 7x7 of 512 at batch 8
// and 1.16-1.19x at 32, 1.25-1.31x from padded planes (16x16, 32x32). 1x1 without padding
// runs mode 3 in one pass: 1.10-1.13x on 7x7 and 14x14, 1.0x on 28x28 (groups with mode 1
// took 0.93-1.0x: too few rows share dy). Where images lie a multiple of 4 KiB apart in x
// or dy (8x8 maps of 32-128 channels), their pixels share L1 sets, and a group holds at most
// four images: 0.94-0.98x with 16, 1.0-1.17x with 4. 4x4 maps run mode 0, their masks in
// registers and dy copied to dbuf, in groups of GP5S_WDB images (one pass up to GP5S_WDB;
// at 256 images 1.39-1.41x over one pass reading dy in place).
static int gp5s_wgrad_plan(int PAD, const gp_shiftconv *g, int N, long *gu, int *rs) {
	const int K = g->C * g->kk;
	const long nch = (g->P + 15) / 16, nu = (long)N * nch;
	*gu = nu, *rs = K;
	if (!PAD && nch == 1) {
		if (nu > GP5S_WDB) *gu = GP5S_WDB, *rs = K < GP5S_WRS ? K : GP5S_WRS;
		return 0;
	}
	if (!PAD && nch > 1) {
		int ones = 1; // every tap's every full chunk in the map, none in the padding
		for (long i = 0; i < (long)g->kk * nch && ones; i++) ones = i % nch >= g->P / 16 || g->mask[i] == 0xffff;
		if (ones) return 3;
	}
	if (g->kk == 1) return 0;
	const long xnst = PAD ? (long)g->C * g->pp : g->xn;
	long u = GP5S_WU;
	if ((xnst % 1024 == 0 || (long)g->O * g->P % 1024 == 0) && u > 4 * nch) u = 4 * nch;
	if (nu > u) *gu = u, *rs = K < GP5S_WRS ? K : GP5S_WRS;
	return !PAD;
}

// gp5s_wgrad_fast sets [*nlo, *nhi) to the images whose steps may read x with plain loads
// (mode 1 of gp5s_wgrad_block): those whose reads at every tap's offset, 16 floats a chunk,
// stay inside x's N images ((N-1)·xn + (C-1)·xc + P floats, the extent the caller checks);
// none when dy's channels [oa, ob) of the batch hold a value that is not finite (there a
// pixel in the padding must add dy·0, a NaN), or with one chunk an image.
static void gp5s_wgrad_fast(const gp_shiftconv *g, const float *dy, int N, int oa, int ob, long *nlo, long *nhi) {
	const long P = g->P, nch = (P + 15) / 16, xn = g->xn;
	*nlo = *nhi = 0;
	if (nch == 1) return;
	long qmin, reach; // reach: past an image's start
	const long ext = gp_reads(g, N, nch * 16, &qmin, &reach);
	long lo = 0, hi = N;
	while (lo < N && lo * xn + qmin < 0) lo++;
	while (hi > lo && (hi - 1) * xn + reach > ext) hi--;
	const long m = (long)(ob - oa) * P; // dy's channels [oa, ob) of an image, contiguous
	__mmask16 bad = 0;
	for (long n = lo; n < hi && !bad; n++) {
		const float *d = dy + (n * g->O + oa) * P;
		long k = 0;
		for (; k + 16 <= m; k += 16) bad |= _mm512_fpclass_ps_mask(_mm512_loadu_ps(d + k), 0x99);
		if (k < m) bad |= _mm512_fpclass_ps_mask(_mm512_maskz_loadu_ps(gp5s_tail(m - k), d + k), 0x99);
	}
	if (!bad) *nlo = lo, *nhi = hi;
}

// gp5s_wgrad is the filter gradient's rows [oa, ob): dw (O×K, K = C·kk) = dy·cols(x)ᵀ summed
// over the N images, dy N×O×P; four output channels by six rows at a time (gp5s_wgrad_rows),
// in the groups gp5s_wgrad_plan sets; x as planes with masks (mode 1 for images [nlo, nhi)
// where the plan takes it, mode 0 for the others) or padded planes (PAD).
static inline __attribute__((always_inline)) void gp5s_wgrad(int PAD, const gp_shiftconv *g, const float *x,
                                                             const float *dy, float *dw, int N, int oa, int ob) {
	float dbuf[GP5S_WDB * 4 * 16] __attribute__((aligned(64)));
	float abuf[GP5S_WRS * 64] __attribute__((aligned(64)));
	long gu, nlo = 0, nhi = 0;
	int rs;
	const int plan = gp5s_wgrad_plan(PAD, g, N, &gu, &rs), full = plan == 3; // mode 3
	if (plan == 1) gp5s_wgrad_fast(g, dy, N, oa, ob, &nlo, &nhi);
	int o0 = oa;
	for (; o0 + 4 <= ob; o0 += 4) gp5s_wgrad_rows(PAD, 4, g, x, dy, dw, N, o0, nlo, nhi, full, gu, rs, dbuf, abuf);
	switch (ob - o0) {
	case 3: gp5s_wgrad_rows(PAD, 3, g, x, dy, dw, N, o0, nlo, nhi, full, gu, rs, dbuf, abuf); break;
	case 2: gp5s_wgrad_rows(PAD, 2, g, x, dy, dw, N, o0, nlo, nhi, full, gu, rs, dbuf, abuf); break;
	case 1: gp5s_wgrad_rows(PAD, 1, g, x, dy, dw, N, o0, nlo, nhi, full, gu, rs, dbuf, abuf); break;
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
