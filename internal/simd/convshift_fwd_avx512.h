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

// gp5f_unit is where one unit of the forward reads and writes: its pixels of channel 0
// from xa (its first pixel), its mask rows at m (tap q's at m[q·ms], ms the block's), its
// outputs of channel 0 from ya in the lanes ka. A unit that spans two images (SPAN in
// gp5f_block, Note [Units across images]) takes its lanes kb from the next image: x from
// xa + xn - P, tap q's mask of those lanes at m[q·ms + tbo] (tbo the block's), outputs
// from ya + yn - P (the next image's pixel 0 less the lanes of ka, so that lane t reads
// its pixel t - (P - s)). One pointer a unit for x and one for its masks: with a second
// of each, GCC ran out of general registers in the loop of rows.
typedef struct {
	const float *xa;
	const unsigned short *m;
	float *ya;
	__mmask16 ka, kb;
} gp5f_unit;

// gp5f_block computes output channels [o0, o0+NO) of units u[0..NV): acc = Σ_r wp[r·O +
// o]·x[row r, k] in the order of r with fused multiply-adds, then + bias[o] when bias is
// not NULL. Row r = c·kk + q is read in one of three modes:
//   0: through the masks, zero-masked loads (the definition: a pixel in the padding adds
//      w·0). Each is a vector ALU micro-op on the two ports of the FMAs besides its load:
//      24 FMAs a row take 3 more.
//   1: plain loads and FMAs merge-masked by the same masks: a pixel in the padding leaves its
//      lane's sum as it is, where mode 0 adds w·0. The same bits while the weights are
//      finite: a lane starts at +0, and an FMA's sum is -0 only from -0 + -0, so no lane is
//      ever -0 and adding ±0 leaves it as it is; x's values past the masks never count. The
//      masks are loaded into mask registers by the load ports. Taken for the units whose
//      reads at every tap stay inside x (gp5f_plain, gp5f_span_units).
//   2: padded planes (gp_pad_planes): plain loads, plain FMAs, the padding's zeros in the
//      planes; lines of ow pixels (a multiple of 16) lw apart, planes of pp, tap q at poff[q].
// With SPAN (modes 0 and 1), each unit's lanes kb are then loaded from the next image,
// merge-masked by their tap masks (a load and a vector ALU micro-op), and its outputs
// stored in two parts.
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
		_mm512_mask_storeu_ps(u[v].ya + (long)(o0 + o) * yc, u[v].ka, r);               \
		if (SPAN) _mm512_mask_storeu_ps(u[v].ya + dys + (long)(o0 + o) * yc, u[v].kb, r); \
	}
#define GP5F_ST(o) \
	if (NO > o) { GP5F_ST1(o, 0) GP5F_ST1(o, 1) GP5F_ST1(o, 2) }
#define GP5F_LD(v)                                                                                     \
	if (NV > v) {                                                                                  \
		if (MODE == 2) {                                                                       \
			x##v = _mm512_loadu_ps(xb##v + off);                                           \
		} else if (MODE == 1) {                                                                \
			k##v = gp5f_kload(m##v + mo);                                                  \
			x##v = _mm512_loadu_ps(xb##v + off);                                           \
			if (SPAN) x##v = _mm512_mask_loadu_ps(x##v, gp5f_kload(m##v + mo + tbo), xb##v + off + dxs); \
		} else if (SPAN) {                                                                     \
			x##v = _mm512_maskz_loadu_ps(gp5f_kload(m##v + mo) & ka##v, xb##v + off);        \
			x##v = _mm512_mask_loadu_ps(x##v, gp5f_kload(m##v + mo + tbo) & kb##v, xb##v + off + dxs); \
		} else {                                                                               \
			x##v = _mm512_maskz_loadu_ps(gp5f_kload(m##v + mo), xb##v + off);              \
		}                                                                                      \
	}
static inline __attribute__((always_inline)) void gp5f_block(int MODE, int SPAN, int NO, int NV, const gp_shiftconv *g,
                                                             const gp5f_unit *u, long ms, long tbo, const float *wp,
                                                             const float *bias, int o0) {
	const int C = g->C, O = g->O, kk = g->kk;
	const long yc = g->yc, dxs = g->xn - g->P, dys = g->yn - g->P;
	(void)dxs, (void)dys, (void)tbo;
	const __m512 z = _mm512_setzero_ps();
	__m512 a00 = z, a01 = z, a02 = z, a10 = z, a11 = z, a12 = z, a20 = z, a21 = z, a22 = z, a30 = z, a31 = z,
	       a32 = z, a40 = z, a41 = z, a42 = z, a50 = z, a51 = z, a52 = z, a60 = z, a61 = z, a62 = z, a70 = z,
	       a71 = z, a72 = z;
	const float *xb0 = u[0].xa, *xb1 = xb0, *xb2 = xb0;
	const unsigned short *m0 = u[0].m, *m1 = m0, *m2 = m0;
	__mmask16 ka0 = u[0].ka, ka1 = ka0, ka2 = ka0, kb0 = u[0].kb, kb1 = kb0, kb2 = kb0;
	if (NV > 1) xb1 = u[1].xa, m1 = u[1].m, ka1 = u[1].ka, kb1 = u[1].kb;
	if (NV > 2) xb2 = u[2].xa, m2 = u[2].m, ka2 = u[2].ka, kb2 = u[2].kb;
	(void)ka0, (void)ka1, (void)ka2, (void)kb0, (void)kb1, (void)kb2;
	const long cst = MODE == 2 ? g->pp : g->xc;
	const int *qo = MODE == 2 ? g->poff : g->qoff;
	const float *wr = wp + o0;
	for (int c = 0; c < C; c++) {
		for (int q = 0; q < kk; q++, wr += O) {
			const long off = (long)c * cst + qo[q], mo = (long)q * ms;
			__m512 x0 = z, x1 = z, x2 = z;
			__mmask16 k0 = 0xffff, k1 = k0, k2 = k0;
			GP5F_LD(0) GP5F_LD(1) GP5F_LD(2)
			GP5F_FMA(0) GP5F_FMA(1) GP5F_FMA(2) GP5F_FMA(3) GP5F_FMA(4) GP5F_FMA(5) GP5F_FMA(6) GP5F_FMA(7)
		}
	}
	GP5F_ST(0) GP5F_ST(1) GP5F_ST(2) GP5F_ST(3) GP5F_ST(4) GP5F_ST(5) GP5F_ST(6) GP5F_ST(7)
}
#undef GP5F_LD
#undef GP5F_FMA
#undef GP5F_FMA1
#undef GP5F_ST
#undef GP5F_ST1

// gp5f_blocks runs units u[0..NV) in mode MODE through all output channels, eight at a
// time.
static inline __attribute__((always_inline)) void gp5f_blocks(int MODE, int SPAN, int NV, const gp_shiftconv *g,
                                                              const gp5f_unit *u, long ms, long tbo, const float *wp,
                                                              const float *bias) {
	const int O = g->O;
	int o0 = 0;
	for (; o0 + 8 <= O; o0 += 8) gp5f_block(MODE, SPAN, 8, NV, g, u, ms, tbo, wp, bias, o0);
	switch (O - o0) {
	case 7: gp5f_block(MODE, SPAN, 7, NV, g, u, ms, tbo, wp, bias, o0); break;
	case 6: gp5f_block(MODE, SPAN, 6, NV, g, u, ms, tbo, wp, bias, o0); break;
	case 5: gp5f_block(MODE, SPAN, 5, NV, g, u, ms, tbo, wp, bias, o0); break;
	case 4: gp5f_block(MODE, SPAN, 4, NV, g, u, ms, tbo, wp, bias, o0); break;
	case 3: gp5f_block(MODE, SPAN, 3, NV, g, u, ms, tbo, wp, bias, o0); break;
	case 2: gp5f_block(MODE, SPAN, 2, NV, g, u, ms, tbo, wp, bias, o0); break;
	case 1: gp5f_block(MODE, SPAN, 1, NV, g, u, ms, tbo, wp, bias, o0); break;
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
	long qmin, reach; // reach: past a unit's first pixel
	const long ext = gp_reads(g, N, 16, &qmin, &reach);
	long l = 0, h = N * nch;
	while (l < h && (l / nch) * xn + (l % nch) * 16 + qmin < 0) l++;
	while (h > l && ((h - 1) / nch) * xn + ((h - 1) % nch) * 16 + reach > ext) h--;
	if (l < h && gp5f_finite(wp, (long)g->C * g->kk * g->O)) *lo = l, *hi = h;
}

// gp5f_img is unit (image n, chunk j) of the per-image units: 16 pixels of one image from
// 16·j, the last chunk's lanes past P off; from padded planes (PAD), its line's first pixel.
static inline __attribute__((always_inline)) gp5f_unit gp5f_img(int PAD, const gp_shiftconv *g, const float *x,
                                                                 float *y, long n, long j) {
	gp5f_unit u;
	u.xa = PAD ? x + n * (long)g->C * g->pp + (j * 16 / g->ow) * g->lw + (j * 16) % g->ow : x + n * g->xn + j * 16;
	u.m = PAD ? 0 : g->mask + j;
	u.ya = y + n * g->yn + j * 16;
	u.ka = gp5f_lanes(g->P - j * 16), u.kb = 0;
	return u;
}

// gp5f_units is the forward of units [u0, u1) (unit u: image u/nch, pixels 16·(u%nch) on):
// y = wpᵀ·cols(x) (+ bias), wp the weights packed K×O (K = C·kk rows in im2col's order),
// three units and eight output channels at a time; units [plo, phi) in mode 1, the others
// in mode 0, or all in mode 2 (PAD).
static inline __attribute__((always_inline)) void gp5f_units(int PAD, const gp_shiftconv *g, const float *x,
                                                             const float *wp, const float *bias, float *y, long u0,
                                                             long u1, long plo, long phi) {
	const long nch = (g->P + 15) / 16;
	gp5f_unit u[3];
	long k = u0;
	for (; k + 3 <= u1; k += 3) {
		for (int v = 0; v < 3; v++) u[v] = gp5f_img(PAD, g, x, y, (k + v) / nch, (k + v) % nch);
		if (PAD)
			gp5f_blocks(2, 0, 3, g, u, nch, 0, wp, bias);
		else if (k >= plo && k + 3 <= phi)
			gp5f_blocks(1, 0, 3, g, u, nch, 0, wp, bias);
		else
			gp5f_blocks(0, 0, 3, g, u, nch, 0, wp, bias);
	}
	for (int v = 0; v < u1 - k; v++) u[v] = gp5f_img(PAD, g, x, y, (k + v) / nch, (k + v) % nch);
	const int MODE = PAD ? 2 : 0;
	if (u1 - k == 2)
		gp5f_blocks(MODE, 0, 2, g, u, nch, 0, wp, bias);
	else if (u1 - k == 1)
		gp5f_blocks(MODE, 0, 1, g, u, nch, 0, wp, bias);
}

// Note [Units across images]
//
// Where P is not a multiple of 16, the per-image units leave lanes of each image's last
// unit idle: on 7x7 maps (P = 49) four units hold 49 pixels, 77% of their lanes. The
// forward then cuts the batch's N·P pixels, image after image, into ceil(N·P/16) units
// instead: unit u holds pixels 16u..16u+15 of the batch, from pixel s = 16u mod P of image
// 16u/P on, and where s + 16 > P its last lanes hold the next image's first pixels. A
// lane's taps depend on its pixel's place in its own image: the masks of a unit starting
// at s are tables built once a call (gp5_span_masks: tap q's at T[q·P + s], those of the
// next image's lanes alone at TB[q·P + s]). A spanning unit loads its first image's lanes
// as any unit does and the next image's lanes over them, merge-masked by TB (a second load
// and a vector ALU micro-op a row, for about one unit in three on 7x7); its outputs are
// stored in two parts. Each output pixel sums the same products in the same order, in
// whichever unit and lane: the same bits as the per-image units. Units are grouped three at
// a time by their kind (spanning or not, plain loads or masked), whatever their order.
//
// The filter gradient (convshift_avx512.h) keeps its per-image units: the same scheme
// there, each unit a step of four output channels by six rows with x and dy loaded in two
// parts where it spans, measured 0.78-0.86x on 7x7 maps with 3x3 taps and 0.70-0.78x with
// 1x1, and 0.76-0.79x and 0.64-0.65x with each image's units that do not span in a loop of
// their own (its loops spilled general registers; with 1x1 it also loses the per-image
// path's steps without masks).

// GP5_SPAN_TAB is the most entries (kk·P) of each of gp5_span_masks's tables; a larger
// convolution runs the per-image units (convShiftSpans in convshift_cgo.go).
#define GP5_SPAN_TAB 4096

// gp5_span_masks fills T (2·kk·P entries, Note [Units across images]) from g's masks: bit
// t of T[q·P + s] is set where pixel s + t of an image, or for s + t >= P pixel s + t - P
// of the next, has tap q inside its plane; TB = T + kk·P holds the bits of the latter
// alone. P must be at least 16.
static void gp5_span_masks(const gp_shiftconv *g, unsigned short *T) {
	const long P = g->P, nch = (P + 15) / 16;
	unsigned short *TB = T + (long)g->kk * P;
	for (int q = 0; q < g->kk; q++) {
		const unsigned short *m = g->mask + (long)q * nch;
		// The 16 bits of the mask row from pixel s on (0 past P, as the row's bits are).
#define GP5_WIN(s) ((((unsigned)((s) / 16 + 1 < nch ? m[(s) / 16 + 1] : 0) << 16 | m[(s) / 16]) >> ((s) % 16)) & 0xffff)
		const unsigned w0 = GP5_WIN(0);
		for (long s = 0; s < P; s++) {
			const long L = P - s;
			const unsigned b = L < 16 ? (w0 << L) & 0xffff : 0;
			T[q * P + s] = (unsigned short)(GP5_WIN(s) | b), TB[q * P + s] = (unsigned short)b;
		}
#undef GP5_WIN
	}
}

// gp5f_span_units is the forward of units [u0, u1) of the batch's ceil(n·P/16) (Note
// [Units across images]): as gp5f_units, the units whose reads of 16 floats at every tap
// from their first pixel stay inside x in mode 1 when the weights are finite (plain), the
// others in mode 0, each kind three units at a time.
static void gp5f_span_units(const gp_shiftconv *g, const unsigned short *T, const float *x,
                            const float *wp, const float *bias, float *y, long n, long u0, long u1, int plain) {
	const long P = g->P, xn = g->xn, yn = g->yn;
	long qmin, reach; // reach: past a unit's first pixel
	const long ext = gp_reads(g, n, 16, &qmin, &reach);
	const long tbo = (long)g->kk * P;
	// Pending units of each kind: bit 0 plain, bit 1 spanning.
	gp5f_unit pend[4][3];
	int np[4] = {0, 0, 0, 0};
	long na = u0 * 16 / P, s = u0 * 16 % P;
	for (long k = u0; k < u1; k++) {
		gp5f_unit u;
		const long a = na * xn + s, L = P - s; // the unit's first pixel in x; its lanes there
		const int sp = L < 16, nb = na + 1 < n;
		u.xa = x + a, u.m = T + s, u.ya = y + na * yn + s;
		u.ka = gp5f_lanes(L);
		u.kb = sp && nb ? (__mmask16)~u.ka : 0;
		const int kind = (plain && a + qmin >= 0 && a + reach <= ext && (!sp || nb)) | sp << 1;
		pend[kind][np[kind]++] = u;
		if (np[kind] == 3) {
			switch (kind) {
			case 0: gp5f_blocks(0, 0, 3, g, pend[0], P, tbo, wp, bias); break;
			case 1: gp5f_blocks(1, 0, 3, g, pend[1], P, tbo, wp, bias); break;
			case 2: gp5f_blocks(0, 1, 3, g, pend[2], P, tbo, wp, bias); break;
			case 3: gp5f_blocks(1, 1, 3, g, pend[3], P, tbo, wp, bias); break;
			}
			np[kind] = 0;
		}
		if ((s += 16) >= P) s -= P, na++;
	}
	// What is left of each kind: a pair as its kind, a lone unit in mode 0 (no more copies of
	// the block for one unit's sake).
	for (int kind = 0; kind < 4; kind++) {
		switch (np[kind] << 2 | kind) {
		case 2 << 2 | 0: gp5f_blocks(0, 0, 2, g, pend[0], P, tbo, wp, bias); break;
		case 2 << 2 | 1: gp5f_blocks(1, 0, 2, g, pend[1], P, tbo, wp, bias); break;
		case 2 << 2 | 2: gp5f_blocks(0, 1, 2, g, pend[2], P, tbo, wp, bias); break;
		case 2 << 2 | 3: gp5f_blocks(1, 1, 2, g, pend[3], P, tbo, wp, bias); break;
		case 1 << 2 | 0:
		case 1 << 2 | 1: gp5f_blocks(0, 0, 1, g, pend[kind], P, tbo, wp, bias); break;
		case 1 << 2 | 2:
		case 1 << 2 | 3: gp5f_blocks(0, 1, 1, g, pend[kind], P, tbo, wp, bias); break;
		}
	}
}

// gp5_conv_shift_fwd is the forward of units [u0, u1) reading x (n images) through the
// masks: the per-image units (gp5f_units), or with span the units across images
// (gp5f_span_units; P at least 16, kk·P at most GP5_SPAN_TAB).
static void gp5_conv_shift_fwd(const gp_shiftconv *g0, const int *qoff, const unsigned short *mask, const float *x,
                               const float *wp, const float *bias, float *y, long n, long u0, long u1, int span) {
	gp_shiftconv gs = *g0;
	gs.qoff = qoff, gs.mask = mask;
	if (span) {
		unsigned short T[2 * GP5_SPAN_TAB];
		gp5_span_masks(&gs, T);
		const int plain = gp5f_finite(wp, (long)gs.C * gs.kk * gs.O);
		gp5f_span_units(&gs, T, x, wp, bias, y, n, u0, u1, plain);
		return;
	}
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

// gp5_phase_merge2 is gp_phase_merge at stride 2 with all four phases used (convshift.h):
// row ih of each of the nc planes of dx interleaves row ih/2 of phase planes (ih%2)·2 and
// (ih%2)·2 + 1, 0 past the planes and in the rows below them; eight pixels of each phase at
// a time, zero-masked past the row's pairs, merged by one permute into sixteen of dx's row.
// A copy: the same values as gp_phase_merge.
static void gp5_phase_merge2(const float *xp, float *dx, long nc, long h, long w, long oh, long ow) {
	const long P = oh * ow, hw = h * w;
	const long jn = w / 2 < ow ? w / 2 : ow; // whole pairs of a row of dx inside the planes
	const __m512i iv = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
	const __m512 z = _mm512_setzero_ps();
	for (long p = 0; p < nc; p++) {
		float *dst = dx + p * hw;
		const float *pl = xp + p * 4 * P;
		for (long ih = 0; ih < h; ih++) {
			float *dr = dst + ih * w;
			const long i = ih / 2, a = ih % 2;
			if (i >= oh) {
				for (long k = 0; k < w; k += 16) _mm512_mask_storeu_ps(dr + k, gp5f_lanes(w - k), z);
				continue;
			}
			const float *s0 = pl + (a * 2) * P + i * ow, *s1 = s0 + P;
			for (long j = 0; j < jn; j += 8) {
				const __mmask16 m = gp5f_lanes(jn - j) & 0xff; // this step's pairs
				const __m512 e = _mm512_maskz_loadu_ps(m, s0 + j), o = _mm512_maskz_loadu_ps(m, s1 + j);
				_mm512_mask_storeu_ps(dr + 2 * j, gp5f_lanes(2 * (jn - j)), _mm512_permutex2var_ps(e, iv, o));
			}
			for (long k = 2 * jn; k < w; k++) {
				const long j = k / 2, b = k % 2;
				dr[k] = j < ow ? pl[(a * 2 + b) * P + i * ow + j] : 0;
			}
		}
	}
}

#pragma GCC pop_options
