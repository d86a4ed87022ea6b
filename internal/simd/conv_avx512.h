// AVX-512 float32 kernels of the convolutions, pooling, bias gradients and GELU (conv_cgo.go);
// each mirrors the nn/ops Go function named in its comment (same algorithm, same layout).
// Compiled for AVX-512 by the pragma below and called only at level AVX512 (level.go).

#include <immintrin.h>
#include <string.h>
#include "avx512_common.h"
#include "geom.h"
#include "gelu_coef.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#pragma GCC optimize("fp-contract=off")

static inline void gp5_copy(float *d, const float *s, long n) {
	long k = 0;
	for (; k + 16 <= n; k += 16) _mm512_storeu_ps(d + k, _mm512_loadu_ps(s + k));
	if (k < n) {
		__mmask16 m = gp5_mask16(n - k);
		_mm512_mask_storeu_ps(d + k, m, _mm512_maskz_loadu_ps(m, s + k));
	}
}

static inline void gp5_zero(float *d, long n) {
	long k = 0;
	__m512 z = _mm512_setzero_ps();
	for (; k + 16 <= n; k += 16) _mm512_storeu_ps(d + k, z);
	if (k < n) _mm512_mask_storeu_ps(d + k, gp5_mask16(n - k), z);
}

static inline void gp5_add(float *d, const float *s, long n) {
	long k = 0;
	for (; k + 16 <= n; k += 16)
		_mm512_storeu_ps(d + k, _mm512_add_ps(_mm512_loadu_ps(d + k), _mm512_loadu_ps(s + k)));
	if (k < n) {
		__mmask16 m = gp5_mask16(n - k);
		_mm512_mask_storeu_ps(d + k, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + k), _mm512_maskz_loadu_ps(m, s + k)));
	}
}

// gp5_copy_s2 sets d[k] = s[2k] for k < n (a stride-2 im2col line: resnet's 7x7 stem and
// strided downsamples), 16 outputs from two loads and a permute; no element past s[2(n-1)]
// is read.
static inline void gp5_copy_s2(float *d, const float *s, long n) {
	const __m512i idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
	for (long k = 0; k < n; k += 16) {
		long m = n - k < 16 ? n - k : 16, need = 2 * m - 1;
		__m512 a = gp5_ldm(gp5_mask16(need), s + 2 * k);
		__m512 b = gp5_ldm(gp5_mask16(need > 16 ? need - 16 : 0), s + 2 * k + 16);
		_mm512_mask_storeu_ps(d + k, gp5_mask16(m), _mm512_permutex2var_ps(a, idx, b));
	}
}

// gp5_valid_range is convValidRange.
static inline void gp5_valid_range(int n, int out, int s, int p, int off, int *lo, int *hi) {
	int a = p - off, b = n - 1 + p - off;
	*lo = 0;
	if (a > 0) *lo = (a + s - 1) / s;
	if (b < 0) {
		*lo = *hi = 0;
		return;
	}
	*hi = b / s + 1;
	if (*hi > out) *hi = out;
	if (*lo > *hi) *lo = *hi;
}

// gp5_bits16 is the lanes [lo, hi) of a 16-lane mask (none when hi <= lo).
static inline __mmask16 gp5_bits16(long lo, long hi) {
	if (lo < 0) lo = 0;
	if (hi > 16) hi = 16;
	return hi > lo ? (__mmask16)(gp5_mask16(hi) & ~gp5_mask16(lo)) : 0;
}

// gp5_bits32 is gp5_bits16 for 32 lanes.
static inline unsigned gp5_bits32(long lo, long hi) {
	if (lo < 0) lo = 0;
	if (hi > 32) hi = 32;
	if (hi <= lo) return 0;
	unsigned h = hi >= 32 ? 0xffffffffu : (1u << hi) - 1, l = lo >= 32 ? 0xffffffffu : (1u << lo) - 1;
	return h & ~l;
}

// gp5_im2col_line writes one output line d[0:n] of im2col whose element ow is base[ow*s]
// for ow in [wlo, whi) and 0 elsewhere, s being 1 or 2: per 16 outputs one or two masked
// loads (the lanes outside [wlo, whi) read nothing, so base may point before the line) and
// one store, a masked one only at the end of the line. The line-by-line copy and zero fills
// cost three masked stores per 16-pixel line, slow on AMD's Zen 4.
static inline void gp5_im2col_line(float *d, const float *base, long n, long wlo, long whi, int s) {
	const __m512i idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
	for (long k = 0; k < n; k += 16) {
		__mmask16 m = gp5_bits16(wlo - k, whi - k);
		__m512 v;
		if (s == 1) {
			v = gp5_ldm(m, base + k);
		} else {
			unsigned need = gp5_bits32(2 * (wlo - k), 2 * (whi - k) - 1);
			__m512 a = gp5_ldm((__mmask16)need, base + 2 * k);
			__m512 b = gp5_ldm((__mmask16)(need >> 16), base + 2 * k + 16);
			v = _mm512_maskz_permutex2var_ps(m, a, idx, b);
		}
		if (k + 16 <= n)
			_mm512_storeu_ps(d + k, v);
		else
			_mm512_mask_storeu_ps(d + k, gp5_mask16(n - k), v);
	}
}

// gp5_im2col_shift is im2colRange for stride 1 with OW == W (convShiftable): row (c, q) of
// col is channel c's plane read from offset shift[q] with the lanes in the padding zeroed
// by mask[q*ceil(P/16) + k/16], 16 pixels per masked load and store whatever the lines'
// width.
static void gp5_im2col_shift(const float *x, float *col, long ld, int lo, int hi, int kk, long P,
			    long hw, const int *shift, const unsigned short *mask) {
	long nch = (P + 15) / 16;
	for (int c = lo; c < hi; c++) {
		const float *xc = x + c * hw;
		for (int q = 0; q < kk; q++) {
			float *d = col + ((long)c * kk + q) * ld;
			const float *sp = xc + shift[q];
			const unsigned short *m = mask + q * nch;
			long k = 0;
			for (; k + 16 <= P; k += 16) _mm512_storeu_ps(d + k, gp5_ldm(m[k / 16], sp + k));
			if (k < P)
				_mm512_mask_storeu_ps(d + k, gp5_mask16(P - k), gp5_ldm(m[k / 16], sp + k));
		}
	}
}

// gp5_col2im_shift is col2imRange for gp5_im2col_shift's geometries: planes [lo, hi) of dx
// are zeroed, then row (c, q) of col is added into channel c's plane at offset shift[q], the
// lanes in the padding masked off; rows in the order of col2imRange, so the sums are the
// same.
static void gp5_col2im_shift(const float *col, float *dx, long ld, int lo, int hi, int kk, long P,
			    long hw, const int *shift, const unsigned short *mask) {
	long nch = (P + 15) / 16;
	gp5_zero(dx + lo * hw, (hi - lo) * hw);
	for (int c = lo; c < hi; c++) {
		float *xc = dx + c * hw;
		for (int q = 0; q < kk; q++) {
			const float *sp = col + ((long)c * kk + q) * ld;
			float *d = xc + shift[q];
			const unsigned short *m = mask + q * nch;
			for (long k = 0; k < P; k += 16) {
				__mmask16 mk = m[k / 16];
				__m512 v = _mm512_add_ps(gp5_ldm(mk, d + k), gp5_ldm(mk, sp + k));
				_mm512_mask_storeu_ps(d + k, mk, v);
			}
		}
	}
}

// gp5_im2col is im2colRange.
static void gp5_im2col(const gp_geom *g, const float *x, float *col, long ld, int lo, int hi) {
	long row = (long)lo * g->KH * g->KW, hw = (long)g->H * g->W;
	for (int c = lo; c < hi; c++) {
		const float *xc = x + c * hw;
		for (int i = 0; i < g->KH; i++) {
			for (int j = 0; j < g->KW; j++) {
				float *dst = col + row * ld;
				row++;
				int wlo, whi;
				gp5_valid_range(g->W, g->OW, g->SW, g->PW, j * g->DW, &wlo, &whi);
				for (int oh = 0; oh < g->OH; oh++) {
					float *d = dst + (long)oh * g->OW;
					int ih = oh * g->SH - g->PH + i * g->DH;
					if (ih < 0 || ih >= g->H) {
						gp5_zero(d, g->OW);
						continue;
					}
					if (g->SW <= 2) {
						// base[ow*SW] is x[c, ih, ow*SW - PW + j*DW].
						const float *base = xc + (long)ih * g->W - g->PW + j * g->DW;
						gp5_im2col_line(d, base, g->OW, wlo, whi, g->SW);
						continue;
					}
					gp5_zero(d, wlo);
					gp5_zero(d + whi, g->OW - whi);
					const float *src = xc + (long)ih * g->W;
					int iw0 = wlo * g->SW - g->PW + j * g->DW;
					if (g->SW == 1) {
						gp5_copy(d + wlo, src + iw0, whi - wlo);
						continue;
					}
					if (g->SW == 2) {
						gp5_copy_s2(d + wlo, src + iw0, whi - wlo);
						continue;
					}
					for (int ow = wlo, iw = iw0; ow < whi; ow++, iw += g->SW) d[ow] = src[iw];
				}
			}
		}
	}
}

// gp5_col2im is col2imRange: channels [lo, hi) of dx are overwritten.
static void gp5_col2im(const gp_geom *g, const float *col, float *dx, long ld, int lo, int hi) {
	long hw = (long)g->H * g->W, row = (long)lo * g->KH * g->KW;
	gp5_zero(dx + lo * hw, (hi - lo) * hw);
	for (int c = lo; c < hi; c++) {
		float *xc = dx + c * hw;
		for (int i = 0; i < g->KH; i++) {
			for (int j = 0; j < g->KW; j++) {
				const float *src = col + row * ld;
				row++;
				int wlo, whi;
				gp5_valid_range(g->W, g->OW, g->SW, g->PW, j * g->DW, &wlo, &whi);
				for (int oh = 0; oh < g->OH; oh++) {
					int ih = oh * g->SH - g->PH + i * g->DH;
					if (ih < 0 || ih >= g->H) continue;
					const float *s = src + (long)oh * g->OW;
					float *d = xc + (long)ih * g->W;
					int iw = wlo * g->SW - g->PW + j * g->DW;
					if (g->SW == 1) {
						gp5_add(d + iw, s + wlo, whi - wlo);
						continue;
					}
					for (int ow = wlo; ow < whi; ow++, iw += g->SW) d[iw] += s[ow];
				}
			}
		}
	}
}

// gp5_im2col_gather is im2colGather: kk kernel offsets, P output pixels, hw = H*W.
static void gp5_im2col_gather(const float *x, float *col, long ld, int lo, int hi, int kk, int P, long hw,
                             const int *gat, const int *padPos, const int *padOff) {
	for (int c = lo; c < hi; c++) {
		const float *xc = x + c * hw;
		for (int q = 0; q < kk; q++) {
			long r = (long)c * kk + q;
			const int *src = gat + (long)q * P;
			float *d = col + r * ld;
			int k = 0;
			for (; k + 16 <= P; k += 16)
				_mm512_storeu_ps(d + k, _mm512_i32gather_ps(_mm512_loadu_si512(src + k), xc, 4));
			if (k < P) {
				__mmask16 m = gp5_mask16(P - k);
				__m512i ix = _mm512_maskz_loadu_epi32(m, src + k);
				_mm512_mask_storeu_ps(d + k, m, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, ix, xc, 4));
			}
			for (int t = padOff[q]; t < padOff[q + 1]; t++) d[padPos[t]] = 0;
		}
	}
}

// gp5_col2im_indexed_add is col2imIndexedAdd: rows of P columns (ld apart) summed into dx
// through idx (-1: padding). Within one row the offsets are distinct, so scalar order does
// not matter; the loop is scalar (AVX-512 scatters are slow on AMD).
static void gp5_col2im_indexed_add(const int *idx, long rows, int P, const float *col, float *dx, long ndx, long ld) {
	(void)ndx;
	for (long r = 0; r < rows; r++) {
		const float *s = col + r * ld;
		const int *ix = idx + r * P;
		for (int k = 0; k < P; k++) {
			int j = ix[k];
			if (j >= 0) dx[j] += s[k];
		}
	}
}

// gp5_col_sums is biasGrad's inner == 1 loop: db[o] = Σ over rows r of dy[r*c + o], rows
// added in order (as the Go loop does, so the float32 sums are the same).
static void gp5_col_sums(const float *dy, long rows, long c, float *db) {
	gp5_zero(db, c);
	for (long r = 0; r < rows; r++) gp5_add(db, dy + r * c, c);
}

// gp5c_window_lanes is one window element for the n <= 16 windows ow0+t, stride s (1 or
// 2): lane t is p[t*s]; nothing past p[(n-1)*s] is read (gp5_copy_s2's permute at stride 2).
static inline __m512 gp5c_window_lanes(const float *p, int s, long n) {
	if (s == 1) return gp5_ldm(gp5_mask16(n), p);
	const __m512i idx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
	long need = 2 * n - 1;
	__m512 a = gp5_ldm(gp5_mask16(need), p);
	__m512 b = gp5_ldm(gp5_mask16(need > 16 ? need - 16 : 0), p + 16);
	return _mm512_permutex2var_ps(a, idx, b);
}

// gp5c_maxpool_vec is gp2c_maxpool_vec (conv_avx2.h) sixteen windows at a time: for the n
// <= 16 windows ow0+t of one output line (rows [ih0, ih1)) whose columns are all inside the
// image, at stride s of 1 or 2, one lane per window, the window's elements visited in the
// scalar order; lane t's best moves only to a strictly greater value, so ties keep the
// first, as does NaN (which compares false); a second pass, only when a lane saw a NaN,
// finds the first NaN in those lanes. The same positions and values as the scalar search.
static inline void gp5c_maxpool_vec(const float *xp, float *yo, int *ao, int W, int KW, int s, int PW, int ih0,
                                   int ih1, int ow0, long n) {
	int w0 = ow0 * s - PW;
	const __m512i lane = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
	                                        _mm512_set1_epi32(s));
	__m512 bv = gp5c_window_lanes(xp + ih0 * W + w0, s, n);
	__m512i best = _mm512_add_epi32(lane, _mm512_set1_epi32(ih0 * W + w0));
	__mmask16 nan = 0;
	for (int ih = ih0; ih < ih1; ih++) {
		for (int j = 0; j < KW; j++) {
			int i = ih * W + w0 + j;
			__m512 v = gp5c_window_lanes(xp + i, s, n);
			__mmask16 gt = _mm512_cmp_ps_mask(v, bv, _CMP_GT_OQ);
			nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
			bv = _mm512_mask_mov_ps(bv, gt, v);
			best = _mm512_mask_mov_epi32(best, gt, _mm512_add_epi32(lane, _mm512_set1_epi32(i)));
		}
	}
	__mmask16 live = gp5_mask16(n);
	if (nan & live) {
		__mmask16 seen = 0;
		for (int ih = ih0; ih < ih1; ih++) {
			for (int j = 0; j < KW; j++) {
				int i = ih * W + w0 + j;
				__m512 v = gp5c_window_lanes(xp + i, s, n);
				__mmask16 first = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & ~seen;
				seen |= first;
				bv = _mm512_mask_mov_ps(bv, first, v);
				best = _mm512_mask_mov_epi32(best, first, _mm512_add_epi32(lane, _mm512_set1_epi32(i)));
			}
		}
	}
	// bv holds the element at best, bit for bit (it is assigned together with best).
	_mm512_mask_storeu_epi32(ao, live, best);
	if (yo) _mm512_mask_storeu_ps(yo, live, bv);
}

// gp5_maxpool is maxPoolSearch for planes [lo, hi): each window's first maximum (or first
// NaN) into arg, its value into y unless y is NULL. Equal values keep the first (so of -0
// and +0 the first, as the Go search, which compares against the maximum with ==, finds).
// At strides 1 and 2 the windows whose columns are all inside the image go sixteen at a
// time (gp5c_maxpool_vec; one at a time, resnet18's 3x3 stride-2 pooling of 32x32 maps
// measured 3.5x slower); the others, and other strides, one at a time.
static void gp5_maxpool(const gp_geom *g, const float *x, float *y, int *arg, long lo, long hi) {
	const int H = g->H, W = g->W, KH = g->KH, KW = g->KW, SH = g->SH, SW = g->SW, PH = g->PH, PW = g->PW;
	const int OH = g->OH, OW = g->OW;
	long hw = (long)H * W, P = (long)OH * OW;
	// Windows [vlo, vhi) of a line have w0 = ow*SW - PW >= 0 and w0 + KW <= W.
	int vlo = 0, vhi = 0;
	if (SW == 1 || SW == 2) {
		vlo = (PW + SW - 1) / SW;
		vhi = W - KW + PW >= 0 ? (W - KW + PW) / SW + 1 : 0;
		if (vhi > OW) vhi = OW;
		if (vlo > vhi) vlo = vhi;
	}
	for (long pl = lo; pl < hi; pl++) {
		const float *xp = x + pl * hw;
		int *ap = arg + pl * P;
		float *yp = y ? y + pl * P : 0;
		for (int oh = 0; oh < OH; oh++) {
			int h0 = oh * SH - PH;
			int ih0 = h0 > 0 ? h0 : 0, ih1 = h0 + KH < H ? h0 + KH : H;
			int *ao = ap + (long)oh * OW;
			float *yo = yp ? yp + (long)oh * OW : 0;
			for (int ow = 0; ow < OW; ow++) {
				if (ow == vlo && vhi > vlo) {
					for (; ow < vhi; ow += 16)
						gp5c_maxpool_vec(xp, yo ? yo + ow : 0, ao + ow, W, KW, SW, PW, ih0, ih1, ow,
						                 vhi - ow < 16 ? vhi - ow : 16);
					ow = vhi;
					if (ow >= OW) break;
				}
				int w0 = ow * SW - PW;
				int iw0 = w0 > 0 ? w0 : 0, iw1 = w0 + KW < W ? w0 + KW : W;
				int best = ih0 * W + iw0;
				float bv = xp[best];
				int nan = bv != bv;
				for (int ih = ih0; ih < ih1; ih++) {
					for (int iw = iw0; iw < iw1; iw++) {
						int i = ih * W + iw;
						float v = xp[i];
						nan |= v != v;
						int gt = v > bv;
						best = gt ? i : best;
						bv = gt ? v : bv;
					}
				}
				if (nan) {
					for (int ih = ih0; ih < ih1; ih++)
						for (int iw = iw0; iw < iw1; iw++)
							if (xp[ih * W + iw] != xp[ih * W + iw]) {
								best = ih * W + iw;
								goto found;
							}
				}
			found:
				ao[ow] = best;
				if (yo) yo[ow] = xp[best];
			}
		}
	}
}

// gp5_maxpool_scatter is maxPool's gradient for planes [lo, hi): dx (hw per plane) cleared,
// then dy (P per plane) added at each window's arg.
static void gp5_maxpool_scatter(const int *arg, const float *dy, float *dx, long lo, long hi, long P, long hw) {
	gp5_zero(dx + lo * hw, (hi - lo) * hw);
	for (long pl = lo; pl < hi; pl++) {
		const int *ap = arg + pl * P;
		const float *dp = dy + pl * P;
		float *xp = dx + pl * hw;
		for (long o = 0; o < P; o++) xp[ap[o]] += dp[o];
	}
}

// The GELU kernels are gelu32Fwd and gelu32Bwd (act_gelu32.go) eight lanes at a time, in
// double precision with the same polynomials; fused multiply-adds may change the double
// result in its last bits, which rounding to float32 almost always absorbs.

static inline __m512d gp5_fma(__m512d a, __m512d b, __m512d c) { return _mm512_fmadd_pd(a, b, c); }

// gp5_estrin15 is c[0] + c[1]·u + ... + c[15]·u¹⁵ (a table of gelu_coef.h) in Estrin's
// form, as geluPoly and geluDPoly evaluate it.
static inline __m512d gp5_estrin15(__m512d u, const double *c) {
	__m512d u2 = _mm512_mul_pd(u, u), u4 = _mm512_mul_pd(u2, u2), u8 = _mm512_mul_pd(u4, u4);
	__m512d p[8];
	for (int i = 0; i < 8; i++) p[i] = gp5_fma(u, _mm512_set1_pd(c[2 * i + 1]), _mm512_set1_pd(c[2 * i]));
	return gp5_fma(u8, gp5_fma(u4, gp5_fma(u2, p[7], p[6]), gp5_fma(u2, p[5], p[4])),
		gp5_fma(u4, gp5_fma(u2, p[3], p[2]), gp5_fma(u2, p[1], p[0])));
}

// gp5_gelu_poly is geluPoly, gp5_gelu_dpoly geluDPoly.
static inline __m512d gp5_gelu_poly(__m512d u) { return gp5_estrin15(u, gp_gelu_p); }
static inline __m512d gp5_gelu_dpoly(__m512d u) { return gp5_estrin15(u, gp_gelu_d); }

// gp5_mills is geluMills.
static inline __m512d gp5_mills(__m512d a) {
	__m512d p = _mm512_set1_pd(0.02515635315459589);
	p = gp5_fma(p, a, _mm512_set1_pd(0.1721106885180427));
	p = gp5_fma(p, a, _mm512_set1_pd(0.6470467359482944));
	p = gp5_fma(p, a, _mm512_set1_pd(1.311793834303858));
	p = gp5_fma(p, a, _mm512_set1_pd(1.2542274946584864));
	__m512d q = _mm512_set1_pd(0.02515635084346288);
	q = gp5_fma(q, a, _mm512_set1_pd(0.1721109201404783));
	q = gp5_fma(q, a, _mm512_set1_pd(0.6721933477294133));
	q = gp5_fma(q, a, _mm512_set1_pd(1.4841329201743));
	q = gp5_fma(q, a, _mm512_set1_pd(1.847614733022324));
	q = gp5_fma(q, a, _mm512_set1_pd(1.0));
	return _mm512_div_pd(p, q);
}

// gp5_exp_neg_half_sq is expNegHalfSq: exp(-a²/2) for 0 <= a <= 30.
static inline __m512d gp5_exp_neg_half_sq(__m512d a) {
	__m512d s = _mm512_mul_pd(_mm512_mul_pd(_mm512_set1_pd(-0.5), a), a);
	__m512d k = _mm512_roundscale_pd(_mm512_mul_pd(s, _mm512_set1_pd(1.4426950408889634)),
	                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(6.93147180369123816490e-01), s);
	r = _mm512_fnmadd_pd(k, _mm512_set1_pd(1.90821492927058770002e-10), r);
	__m512d r2 = _mm512_mul_pd(r, r), r4 = _mm512_mul_pd(r2, r2);
	__m512d a0 = _mm512_add_pd(_mm512_set1_pd(1), r);
	__m512d a1 = gp5_fma(r, _mm512_set1_pd(1.0 / 6), _mm512_set1_pd(1.0 / 2));
	__m512d b0 = gp5_fma(r, _mm512_set1_pd(1.0 / 120), _mm512_set1_pd(1.0 / 24));
	__m512d b1 = gp5_fma(r, _mm512_set1_pd(1.0 / 5040), _mm512_set1_pd(1.0 / 720));
	__m512d e = gp5_fma(r4, gp5_fma(r4, _mm512_set1_pd(1.0 / 40320), gp5_fma(r2, b1, b0)), gp5_fma(r2, a1, a0));
	return _mm512_scalef_pd(e, k);
}

static const double gp5_inv_sqrt_2pi = 0.3989422804014327;

static inline __m512d gp5_abs(__m512d v) { return _mm512_abs_pd(v); }

static void gp5_gelu_fwd(const float *x, float *y, long n) {
	for (long i = 0; i < n; i += 8) {
		__mmask8 m = n - i >= 8 ? 0xff : (__mmask8)((1u << (n - i)) - 1);
		__m512d v = _mm512_cvtps_pd(gp5_ldm8(m, x + i));
		__m512d a = gp5_abs(v);
		__m512d p = _mm512_add_pd(_mm512_set1_pd(0.5), _mm512_mul_pd(v, gp5_gelu_poly(_mm512_mul_pd(v, v))));
		__mmask8 tail = _mm512_mask_cmp_pd_mask(m, a, _mm512_set1_pd(3.0), _CMP_NLT_UQ);
		if (tail) {
			__m512d ac = _mm512_min_pd(_mm512_set1_pd(30.0), a);
			__m512d t = _mm512_mul_pd(_mm512_mul_pd(gp5_exp_neg_half_sq(ac), _mm512_set1_pd(gp5_inv_sqrt_2pi)), gp5_mills(ac));
			__mmask8 neg = _mm512_movepi64_mask(_mm512_castpd_si512(v));
			__m512d sel = _mm512_mask_blend_pd(neg, _mm512_sub_pd(_mm512_set1_pd(1), t), t);
			p = _mm512_mask_blend_pd(tail, p, sel);
		}
		_mm256_mask_storeu_ps(y + i, m, _mm512_cvtpd_ps(_mm512_mul_pd(v, p)));
	}
}

static void gp5_gelu_bwd(const float *x, const float *dy, float *dx, long n) {
	for (long i = 0; i < n; i += 8) {
		__mmask8 m = n - i >= 8 ? 0xff : (__mmask8)((1u << (n - i)) - 1);
		__m512d v = _mm512_cvtps_pd(gp5_ldm8(m, x + i));
		__m512d g = _mm512_cvtps_pd(gp5_ldm8(m, dy + i));
		__m512d a = gp5_abs(v);
		__m512d d = _mm512_add_pd(_mm512_set1_pd(0.5), _mm512_mul_pd(v, gp5_gelu_dpoly(_mm512_mul_pd(v, v))));
		__mmask8 tail = _mm512_mask_cmp_pd_mask(m, a, _mm512_set1_pd(3.0), _CMP_NLT_UQ);
		if (tail) {
			__m512d ac = _mm512_min_pd(_mm512_set1_pd(30.0), a);
			__m512d pdf = _mm512_mul_pd(gp5_exp_neg_half_sq(ac), _mm512_set1_pd(gp5_inv_sqrt_2pi));
			__m512d t = _mm512_mul_pd(pdf, gp5_mills(ac));
			__mmask8 neg = _mm512_movepi64_mask(_mm512_castpd_si512(v));
			__m512d sel = _mm512_mask_blend_pd(neg, _mm512_sub_pd(_mm512_set1_pd(1), t), t);
			__m512d sa = _mm512_mask_blend_pd(neg, ac, _mm512_sub_pd(_mm512_setzero_pd(), ac));
			__m512d dt = _mm512_add_pd(sel, _mm512_mul_pd(sa, pdf));
			d = _mm512_mask_blend_pd(tail, d, dt);
		}
		_mm256_mask_storeu_ps(dx + i, m, _mm512_cvtpd_ps(_mm512_mul_pd(g, d)));
	}
}

#pragma GCC pop_options
