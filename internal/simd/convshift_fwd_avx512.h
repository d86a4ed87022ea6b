// AVX-512 forward of the implicit convolution (convshift_cgo.go's ConvShiftFwd and
// ConvShiftFwdPad; the data gradient runs as a forward over dy) and the stride-2 phase
// split before it (PhaseSplit), beside convshift_avx512.h's filter
// gradient. Compiled for AVX-512 by the pragma below and called only at level AVX512
// (level.go). The sums are the same bits as convshift_avx2.h's gp2_conv_shift_fwd.

#include <immintrin.h>
#include "convshift.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#pragma GCC optimize("fp-contract=off")

// gp5f_lanes is the lane mask of the first n of 16 lanes, none for n <= 0.
static inline __mmask16 gp5f_lanes(long n) { return n <= 0 ? 0 : n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

// gp5f_kload loads the 16-bit mask at p into a mask register with one load micro-op (GCC
// loads it into a general register and moves it over, a micro-op on a vector port).
static inline __mmask16 gp5f_kload(const unsigned short *p) {
	__mmask16 k;
	__asm__("kmovw %1, %0" : "=k"(k) : "m"(*p));
	return k;
}

// gp5f_block computes output channels [o0, o0+NO) of units u[0..NV), a unit being 16 pixels
// of one image (its chunk j of ceil(P/16)): acc = Σ_r wp[r·O + o]·x[row r, k] in the order of
// r with fused multiply-adds, then + bias[o] when bias is not NULL. Row r = c·kk + q is read
// in one of three modes:
//   0: through the masks, zero-masked loads (the definition: a pixel in the padding adds
//      w·0). Each is a vector ALU micro-op on the two ports of the FMAs besides its load:
//      24 FMAs a row take 3 more.
//   1: plain loads and FMAs merge-masked by the same masks: a pixel in the padding leaves its
//      lane's sum as it is, where mode 0 adds w·0. The same bits while the weights are
//      finite: a lane starts at +0, and an FMA's sum is -0 only from -0 + -0, so no lane is
//      ever -0 and adding ±0 leaves it as it is; x's values past the masks never count. The
//      masks are loaded into mask registers by the load ports. Taken for the units whose
//      reads at every tap stay inside x (gp5f_units).
//   2: padded planes (gp_pad_planes): plain loads, plain FMAs, the padding's zeros in the
//      planes; lines of ow pixels (a multiple of 16) lw apart, planes of pp, tap q at poff[q].
// The accumulators are named variables (a<o><v>), not an array: GCC at -O3 keeps an array of
// them in registers but also stores it to the stack on every iteration.
#define GP5F_FMA1(o, v)                                                                                          \
	if (NV > v) a##o##v = MODE == 1 ? _mm512_mask3_fmadd_ps(w, x##v, a##o##v, k##v) : _mm512_fmadd_ps(w, x##v, a##o##v);
#define GP5F_FMA(o)                                                                     \
	if (NO > o) {                                                                       \
		__m512 w = _mm512_set1_ps(wr[o]);                                               \
		GP5F_FMA1(o, 0) GP5F_FMA1(o, 1) GP5F_FMA1(o, 2)                                 \
	}
#define GP5F_ST1(o, v)                                                                  \
	if (NV > v) {                                                                       \
		__m512 r = a##o##v;                                                             \
		if (bias) r = _mm512_add_ps(r, _mm512_set1_ps(bias[o0 + o]));                   \
		_mm512_mask_storeu_ps(y##v + (long)(o0 + o) * yc, t##v, r);                     \
	}
#define GP5F_ST(o) \
	if (NO > o) { GP5F_ST1(o, 0) GP5F_ST1(o, 1) GP5F_ST1(o, 2) }
#define GP5F_LD(v)                                                                                     \
	if (NV > v) {                                                                                  \
		if (MODE == 2) {                                                                       \
			x##v = _mm512_loadu_ps(xb##v + off);                                           \
		} else if (MODE == 1) {                                                                \
			k##v = gp5f_kload(m##v + mo);                                 \
			x##v = _mm512_loadu_ps(xb##v + off);                                           \
		} else {                                                                               \
			x##v = _mm512_maskz_loadu_ps(gp5f_kload(m##v + mo), xb##v + off); \
		}                                                                                      \
	}
static inline __attribute__((always_inline)) void gp5f_block(int MODE, int NO, int NV, const gp_shiftconv *g,
                                                             const long *un, const long *uj, const float *x,
                                                             const float *wp, const float *bias, float *y, int o0) {
	const int C = g->C, O = g->O, kk = g->kk;
	const long P = g->P, yc = g->yc, nch = (P + 15) / 16;
	const __m512 z = _mm512_setzero_ps();
	__m512 a00 = z, a01 = z, a02 = z, a10 = z, a11 = z, a12 = z, a20 = z, a21 = z, a22 = z, a30 = z, a31 = z,
	       a32 = z, a40 = z, a41 = z, a42 = z, a50 = z, a51 = z, a52 = z, a60 = z, a61 = z, a62 = z, a70 = z,
	       a71 = z, a72 = z;
	// Unit v's pixels of channel 0 and its masks (mask row q at m<v>[q·nch]); from padded
	// planes, its line's first pixel.
#define GP5F_XB(v) (MODE == 2 ? x + un[v] * (long)C * g->pp + (uj[v] * 16 / g->ow) * g->lw + (uj[v] * 16) % g->ow \
	                      : x + un[v] * g->xn + uj[v] * 16)
	const float *xb0 = GP5F_XB(0), *xb1 = xb0, *xb2 = xb0;
	const unsigned short *m0 = MODE == 2 ? 0 : g->mask + uj[0], *m1 = m0, *m2 = m0;
	if (NV > 1) xb1 = GP5F_XB(1), m1 = MODE == 2 ? 0 : g->mask + uj[1];
	if (NV > 2) xb2 = GP5F_XB(2), m2 = MODE == 2 ? 0 : g->mask + uj[2];
#undef GP5F_XB
	const long cst = MODE == 2 ? g->pp : g->xc;
	const int *qo = MODE == 2 ? g->poff : g->qoff;
	const float *wr = wp + o0;
	for (int c = 0; c < C; c++) {
		for (int q = 0; q < kk; q++, wr += O) {
			const long off = (long)c * cst + qo[q], mo = (long)q * nch;
			__m512 x0 = z, x1 = z, x2 = z;
			__mmask16 k0 = 0xffff, k1 = k0, k2 = k0;
			GP5F_LD(0) GP5F_LD(1) GP5F_LD(2)
			GP5F_FMA(0) GP5F_FMA(1) GP5F_FMA(2) GP5F_FMA(3) GP5F_FMA(4) GP5F_FMA(5) GP5F_FMA(6) GP5F_FMA(7)
		}
	}
	float *y0 = y + un[0] * g->yn + uj[0] * 16, *y1 = y0, *y2 = y0;
	__mmask16 t0 = gp5f_lanes(P - uj[0] * 16), t1 = t0, t2 = t0;
	if (NV > 1) y1 = y + un[1] * g->yn + uj[1] * 16, t1 = gp5f_lanes(P - uj[1] * 16);
	if (NV > 2) y2 = y + un[2] * g->yn + uj[2] * 16, t2 = gp5f_lanes(P - uj[2] * 16);
	GP5F_ST(0) GP5F_ST(1) GP5F_ST(2) GP5F_ST(3) GP5F_ST(4) GP5F_ST(5) GP5F_ST(6) GP5F_ST(7)
}
#undef GP5F_LD
#undef GP5F_FMA
#undef GP5F_FMA1
#undef GP5F_ST
#undef GP5F_ST1

// gp5f_blocks runs units un[0..NV), uj[0..NV) in mode MODE through all output channels,
// eight at a time.
static inline __attribute__((always_inline)) void gp5f_blocks(int MODE, int NV, const gp_shiftconv *g, const long *un,
                                                              const long *uj, const float *x, const float *wp,
                                                              const float *bias, float *y) {
	const int O = g->O;
	int o0 = 0;
	for (; o0 + 8 <= O; o0 += 8) gp5f_block(MODE, 8, NV, g, un, uj, x, wp, bias, y, o0);
	switch (O - o0) {
	case 7: gp5f_block(MODE, 7, NV, g, un, uj, x, wp, bias, y, o0); break;
	case 6: gp5f_block(MODE, 6, NV, g, un, uj, x, wp, bias, y, o0); break;
	case 5: gp5f_block(MODE, 5, NV, g, un, uj, x, wp, bias, y, o0); break;
	case 4: gp5f_block(MODE, 4, NV, g, un, uj, x, wp, bias, y, o0); break;
	case 3: gp5f_block(MODE, 3, NV, g, un, uj, x, wp, bias, y, o0); break;
	case 2: gp5f_block(MODE, 2, NV, g, un, uj, x, wp, bias, y, o0); break;
	case 1: gp5f_block(MODE, 1, NV, g, un, uj, x, wp, bias, y, o0); break;
	}
}

// gp5f_finite reports whether the n floats at p are all finite.
static int gp5f_finite(const float *p, long n) {
	__mmask16 bad = 0;
	long k = 0;
	for (; k + 16 <= n; k += 16) bad |= _mm512_fpclass_ps_mask(_mm512_loadu_ps(p + k), 0x99);
	if (k < n) bad |= _mm512_fpclass_ps_mask(_mm512_maskz_loadu_ps(gp5f_lanes(n - k), p + k), 0x99);
	return !bad;
}

// gp5f_plain sets [*lo, *hi) to the units of the N images whose rows may be read with plain
// loads (mode 1): those whose reads, 16 floats at every tap's offset in every channel, stay
// inside x's N images ((N-1)·xn + (C-1)·xc + P floats, the extent the caller checks); none
// when the weights (C·kk×O) hold a value that is not finite.
static void gp5f_plain(const gp_shiftconv *g, const float *wp, long N, long *lo, long *hi) {
	const long P = g->P, nch = (P + 15) / 16, xn = g->xn;
	*lo = *hi = 0;
	long qmin = g->qoff[0], qmax = g->qoff[0];
	for (int q = 1; q < g->kk; q++) {
		if (g->qoff[q] < qmin) qmin = g->qoff[q];
		if (g->qoff[q] > qmax) qmax = g->qoff[q];
	}
	const long ext = (N - 1) * xn + (long)(g->C - 1) * g->xc + P;
	const long reach = (long)(g->C - 1) * g->xc + qmax + 16; // past a unit's first pixel
	long l = 0, h = N * nch;
	while (l < h && (l / nch) * xn + (l % nch) * 16 + qmin < 0) l++;
	while (h > l && ((h - 1) / nch) * xn + ((h - 1) % nch) * 16 + reach > ext) h--;
	if (l < h && gp5f_finite(wp, (long)g->C * g->kk * g->O)) *lo = l, *hi = h;
}

// gp5f_units is the forward of units [u0, u1) (unit u: image u/nch, pixels 16·(u%nch) on):
// y = wpᵀ·cols(x) (+ bias), wp the weights packed K×O (K = C·kk rows in im2col's order),
// three units and eight output channels at a time; units [plo, phi) in mode 1, the others
// in mode 0, or all in mode 2 (PAD).
static inline __attribute__((always_inline)) void gp5f_units(int PAD, const gp_shiftconv *g, const float *x,
                                                             const float *wp, const float *bias, float *y, long u0,
                                                             long u1, long plo, long phi) {
	long nch = (g->P + 15) / 16;
	long un[3], uj[3];
	long u = u0;
	for (; u + 3 <= u1; u += 3) {
		for (int v = 0; v < 3; v++) un[v] = (u + v) / nch, uj[v] = (u + v) % nch;
		if (PAD)
			gp5f_blocks(2, 3, g, un, uj, x, wp, bias, y);
		else if (u >= plo && u + 3 <= phi)
			gp5f_blocks(1, 3, g, un, uj, x, wp, bias, y);
		else
			gp5f_blocks(0, 3, g, un, uj, x, wp, bias, y);
	}
	for (int v = 0; v < u1 - u; v++) un[v] = (u + v) / nch, uj[v] = (u + v) % nch;
	const int MODE = PAD ? 2 : 0;
	if (u1 - u == 2)
		gp5f_blocks(MODE, 2, g, un, uj, x, wp, bias, y);
	else if (u1 - u == 1)
		gp5f_blocks(MODE, 1, g, un, uj, x, wp, bias, y);
}

// gp5_conv_shift_fwd is gp5f_units reading x (n images) through the masks.
static void gp5_conv_shift_fwd(const gp_shiftconv *g0, const int *qoff, const unsigned short *mask, const float *x,
                               const float *wp, const float *bias, float *y, long n, long u0, long u1) {
	gp_shiftconv gs = *g0;
	gs.qoff = qoff, gs.mask = mask;
	long lo, hi;
	gp5f_plain(&gs, wp, n, &lo, &hi);
	gp5f_units(0, &gs, x, wp, bias, y, u0, u1, lo, hi);
}

// gp5_conv_shift_fwd_pad is gp5f_units reading padded planes xp (lines of ow pixels, a
// multiple of 16, lw apart, planes of pp, tap q at poff[q]) with plain loads: the same
// products in the same order as gp5_conv_shift_fwd's, so the same bits, without a vector
// ALU micro-op for each masked load.
static void gp5_conv_shift_fwd_pad(const gp_shiftconv *g0, const int *poff, long ow, long lw, long pp, const float *xp,
                                   const float *wp, const float *bias, float *y, long u0, long u1) {
	gp_shiftconv gs = *g0;
	gs.poff = poff, gs.ow = ow, gs.lw = lw, gs.pp = pp;
	gp5f_units(1, &gs, xp, wp, bias, y, u0, u1, 0, 0);
}

// gp5_phase_split2 is gp_phase_split at stride 2 (convshift.h: plane a·2 + b of each of the
// nc planes of x holds x[2i + a, 2j + b], 0 past x's edge, for the phases in used), 16
// pixels of each phase at a time: 32 of x's row loaded (zero-masked past its end) and
// split into even and odd lanes by two permutes. A copy: the same values as gp_phase_split.
static void gp5_phase_split2(const float *x, float *xp, long nc, long h, long w, long oh, long ow,
                             unsigned long long used) {
	const long P = oh * ow, hw = h * w;
	const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	const __m512 z = _mm512_setzero_ps();
	for (long p = 0; p < nc; p++) {
		const float *src = x + p * hw;
		float *pl = xp + p * 4 * P;
		for (long a = 0; a < 2; a++) {
			const int u0 = (used >> (a * 2)) & 1, u1 = (used >> (a * 2 + 1)) & 1;
			if (!u0 && !u1) continue;
			for (long i = 0; i < oh; i++) {
				float *d0 = pl + (a * 2) * P + i * ow, *d1 = d0 + P;
				const long ih = 2 * i + a;
				for (long j = 0; j < ow; j += 16) {
					// Lanes past the line's end land on the plane's next lines, written
					// after this one: plain stores where all 16 stay in the plane.
					const __mmask16 st = gp5f_lanes(ow - j);
					const int full = i * ow + j + 16 <= P;
					__m512 e = z, o = z;
					if (ih < h) {
						const float *sr = src + ih * w + 2 * j;
						const long n = w - 2 * j; // x's pixels from sr on, in this row
						const __m512 lo = _mm512_maskz_loadu_ps(gp5f_lanes(n), sr);
						const __m512 hi = n > 16 ? _mm512_maskz_loadu_ps(gp5f_lanes(n - 16), sr + 16) : z;
						e = _mm512_permutex2var_ps(lo, ev, hi), o = _mm512_permutex2var_ps(lo, od, hi);
					}
					if (full) {
						if (u0) _mm512_storeu_ps(d0 + j, e);
						if (u1) _mm512_storeu_ps(d1 + j, o);
					} else {
						if (u0) _mm512_mask_storeu_ps(d0 + j, st, e);
						if (u1) _mm512_mask_storeu_ps(d1 + j, st, o);
					}
				}
			}
		}
	}
}

#pragma GCC pop_options
