// AVX2+FMA float32 kernels of the convolutions, pooling, bias gradients and GELU (conv_cgo.go),
// the twins of conv_avx512.h's: same signatures, same results (bit for bit; GELU the same
// doubles, so within one float32 ulp of the Go code as at AVX-512). Each mirrors the nn/ops
// Go function and the gp5_ kernel named in its comment. Compiled for AVX2 and FMA by the
// pragma below and called only at level AVX2 (level.go). Eight lanes instead of sixteen; the
// AVX-512 mask registers become lane masks: maskload (fault-free in its masked lanes) for
// partial reads, and for partial writes plain stores (gp2v_stp's few, or whole
// vectors where the excess is overwritten later) rather than maskstore, which is slow on
// AMD (only gp2_col2im_shift's spans that reach past a plane use it). The geometry is
// copied into locals first: the vector stores may alias anything, so fields read through g
// would be reloaded after each one, and those loads stall behind the stores. Internal
// helpers are prefixed gp2c_: this header shares a translation unit with norm_avx2.h,
// whose helpers are gp2_.

#include <immintrin.h>
#include "avx2_common.h"
#include "geom.h"
#include "gelu_coef.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")

// gp2c_iota is the lane numbers 0..7.
static inline __m256i gp2c_iota(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }

// gp2c_range is the lane mask of the lanes t with lo <= t < hi (none when hi <= lo).
static inline __m256i gp2c_range(long lo, long hi) {
	if (lo < 0) lo = 0;
	if (hi > 8) hi = 8;
	if (hi < lo) hi = lo;
	__m256i t = gp2c_iota();
	return _mm256_and_si256(_mm256_cmpgt_epi32(t, _mm256_set1_epi32((int)lo - 1)),
	                        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), t));
}

// gp2c_store_parti is gp2v_stp for int32 lanes.
static inline void gp2c_store_parti(int *d, __m256i v, long n) {
	gp2v_stp((float *)d, _mm256_castsi256_ps(v), n);
}

// gp2c_zero is gp5_zero: d[0:n] = +0.
static inline void gp2c_zero(float *d, long n) {
	__m256 z = _mm256_setzero_ps();
	long k = 0;
	for (; k + 8 <= n; k += 8) _mm256_storeu_ps(d + k, z);
	if (k < n) gp2v_stp(d + k, z, n - k);
}

// gp2c_add is gp5_add: d[k] += s[k] for k < n, one rounding each, as the Go loops.
static inline void gp2c_add(float *d, const float *s, long n) {
	long k = 0;
	for (; k + 32 <= n; k += 32) {
		__m256 a0 = _mm256_add_ps(_mm256_loadu_ps(d + k), _mm256_loadu_ps(s + k));
		__m256 a1 = _mm256_add_ps(_mm256_loadu_ps(d + k + 8), _mm256_loadu_ps(s + k + 8));
		__m256 a2 = _mm256_add_ps(_mm256_loadu_ps(d + k + 16), _mm256_loadu_ps(s + k + 16));
		__m256 a3 = _mm256_add_ps(_mm256_loadu_ps(d + k + 24), _mm256_loadu_ps(s + k + 24));
		_mm256_storeu_ps(d + k, a0);
		_mm256_storeu_ps(d + k + 8, a1);
		_mm256_storeu_ps(d + k + 16, a2);
		_mm256_storeu_ps(d + k + 24, a3);
	}
	for (; k + 8 <= n; k += 8) _mm256_storeu_ps(d + k, _mm256_add_ps(_mm256_loadu_ps(d + k), _mm256_loadu_ps(s + k)));
	if (k < n) {
		__m256i m = gp2v_m8(n - k);
		gp2v_stp(d + k, _mm256_add_ps(_mm256_maskload_ps(d + k, m), _mm256_maskload_ps(s + k, m)), n - k);
	}
}

// gp2c_even is lanes 0, 2, .., 14 of the 16 lanes (a, b): a stride-2 line's outputs.
static inline __m256 gp2c_even(__m256 a, __m256 b) {
	// The shuffle gives a0 a2 b0 b2 | a4 a6 b4 b6; the permute puts the 64-bit pairs in order.
	__m256 s = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
	return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)));
}

// gp2c_valid_range is gp5_valid_range (convValidRange).
static inline void gp2c_valid_range(int n, int out, int s, int p, int off, int *lo, int *hi) {
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

// gp2c_line8 is outputs k..k+7 of an im2col line (gp2c_im2col_line's base[ow*s], s 1 or 2)
// from plain loads of base[k*s] to base[(k+7)*s] only. At stride 2 the second load starts
// one float early, at base[2k+7], so that it ends at the last output's element: the
// outputs are a's even lanes and b's odd ones.
static inline __m256 gp2c_line8(const float *base, long k, int s) {
	if (s == 1) return _mm256_loadu_ps(base + k);
	__m256 a = _mm256_loadu_ps(base + 2 * k), b = _mm256_loadu_ps(base + 2 * k + 7);
	// a0 a2 b1 b3 | a4 a6 b5 b7, then the 64-bit pairs in order.
	__m256 v = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 2, 0));
	return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
}

// gp2c_im2col_line is gp5_im2col_line: d[0:n] of one im2col line, d[ow] = base[ow*s] for
// ow in [wlo, whi) and 0 elsewhere, s being 1 or 2 (base may point before the line; only
// elements of [wlo, whi) are read). room (>= n) is how many floats from d the line may
// write: its stores may run past n up to room, into the next line, which the caller writes
// after this one. With eight outputs or more in [wlo, whi), every load and store is a plain
// one: the leading zeros first, then the copy (its last vector overlapping back instead of
// reading past whi), which overwrites the zeros stored past wlo, then the trailing zeros.
// Masks made that loop several times slower (loaded per vector, they stall behind the
// stores to col); narrower lines use masked loads, their masks computed per vector.
static inline void gp2c_im2col_line(float *d, const float *base, long n, long wlo, long whi, int s, long room) {
	__m256 z = _mm256_setzero_ps();
	if (whi - wlo >= 8) {
		for (long k = 0; k < wlo; k += 8) _mm256_storeu_ps(d + k, z);
		long k = wlo;
		for (; k + 8 < whi; k += 8) _mm256_storeu_ps(d + k, gp2c_line8(base, k, s));
		_mm256_storeu_ps(d + whi - 8, gp2c_line8(base, whi - 8, s));
		for (k = whi; k < n; k += 8) {
			if (k + 8 <= room)
				_mm256_storeu_ps(d + k, z);
			else
				gp2v_stp(d + k, z, n - k);
		}
		return;
	}
	for (long k = 0; k < n; k += 8) {
		__m256 v;
		if (s == 1) {
			v = _mm256_maskload_ps(base + k, gp2c_range(wlo - k, whi - k));
		} else {
			// Output lane t is source lane 2t of base + 2k; source lanes 2(wlo-k) to
			// 2(whi-k)-2 are read.
			long lo = 2 * (wlo - k), hi = 2 * (whi - k) - 1;
			__m256 a = _mm256_maskload_ps(base + 2 * k, gp2c_range(lo, hi));
			__m256 b = _mm256_maskload_ps(base + 2 * k + 8, gp2c_range(lo - 8, hi - 8));
			v = gp2c_even(a, b);
		}
		if (k + 8 <= room)
			_mm256_storeu_ps(d + k, v);
		else
			gp2v_stp(d + k, v, n - k);
	}
}

// gp2c_zero_line is gp2c_zero with gp2c_im2col_line's room.
static inline void gp2c_zero_line(float *d, long n, long room) {
	__m256 z = _mm256_setzero_ps();
	for (long k = 0; k < n; k += 8) {
		if (k + 8 <= room)
			_mm256_storeu_ps(d + k, z);
		else
			gp2v_stp(d + k, z, n - k);
	}
}

// gp2_im2col_shift is gp5_im2col_shift (im2colRange for stride 1 with OW == W): row (c, q)
// of col is channel c's plane read from offset shift[q], the lanes in the padding zeroed by
// the 16-lane mask[q*ceil(P/16) + k/16], taken as two 8-lane halves.
static void gp2_im2col_shift(const float *x, float *col, long ld, int lo, int hi, int kk, long P,
			    long hw, const int *shift, const unsigned short *mask) {
	long nch = (P + 15) / 16;
	for (int c = lo; c < hi; c++) {
		const float *xc = x + c * hw;
		for (int q = 0; q < kk; q++) {
			float *d = col + ((long)c * kk + q) * ld;
			const float *sp = xc + shift[q];
			const unsigned short *m = mask + q * nch;
			long k = 0;
			for (; k + 16 <= P; k += 16) {
				__m256i ml, mh;
				gp2v_bits16(m[k / 16], &ml, &mh);
				_mm256_storeu_ps(d + k, _mm256_maskload_ps(sp + k, ml));
				_mm256_storeu_ps(d + k + 8, _mm256_maskload_ps(sp + k + 8, mh));
			}
			if (k < P) {
				// The mask's bits past P are 0 (shiftTable sets only pixels' bits).
				unsigned mk = m[k / 16];
				if (k + 8 <= P) {
					_mm256_storeu_ps(d + k, _mm256_maskload_ps(sp + k, gp2v_bits(mk)));
					k += 8;
					mk >>= 8;
				}
				if (k < P) gp2v_stp(d + k, _mm256_maskload_ps(sp + k, gp2v_bits(mk)), P - k);
			}
		}
	}
}

// gp2c_shift_half is one eight-pixel half of gp2_col2im_shift's spans outside [k0, k1]: s
// (pixels k.. of the row, n = P - k of them left) added into d = the plane's pixels at ok =
// off + k in the lanes of m; whole when the half lies in the plane and the row, else with
// masked loads and stores that touch no other lane.
static inline void gp2c_shift_half(float *d, const float *s, __m256i m, long n, long ok, long hw) {
	if (n >= 8 && ok >= 0 && ok + 8 <= hw) {
		__m256 v = _mm256_and_ps(_mm256_loadu_ps(s), _mm256_castsi256_ps(m));
		_mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), v));
		return;
	}
	if (n < 8) m = _mm256_and_si256(m, gp2v_m8(n));
	if (_mm256_testz_si256(m, m)) return;
	_mm256_maskstore_ps(d, m, _mm256_add_ps(_mm256_maskload_ps(d, m), _mm256_maskload_ps(s, m)));
}

// gp2_col2im_shift is gp5_col2im_shift (col2imRange for gp2_im2col_shift's geometries):
// planes [lo, hi) of dx zeroed, then row (c, q) of col added into channel c's plane at
// offset shift[q], rows in col2imRange's order. Sixteen pixels whose span lies inside the
// channel's plane are loaded and stored whole, the masked-off lanes adding +0: a pixel of dx
// starts at +0 and is only ever added to, so it is never -0 (x + y is -0 only when both
// are), and adding +0 to anything but -0 leaves its bits; the plane is this call's alone, so
// rewriting a pixel with itself races with nothing. Spans reaching outside the plane (the
// first and last lines) and the row's last pixels use masked loads and stores.
static void gp2_col2im_shift(const float *col, float *dx, long ld, int lo, int hi, int kk, long P,
			    long hw, const int *shift, const unsigned short *mask) {
	long nch = (P + 15) / 16;
	gp2c_zero(dx + lo * hw, (hi - lo) * hw);
	for (int c = lo; c < hi; c++) {
		float *xc = dx + c * hw;
		for (int q = 0; q < kk; q++) {
			const float *sp = col + ((long)c * kk + q) * ld;
			long off = shift[q];
			float *d = xc + off;
			const unsigned short *m = mask + q * nch;
			// The spans [k, k+16) inside the plane and the row (0 <= off + k, off + k + 16 <= hw,
			// k + 16 <= P) are those with k0 <= k <= k1.
			long k0 = off < 0 ? (-off + 15) / 16 * 16 : 0, k1 = hw - off - 16 < P - 16 ? hw - off - 16 : P - 16;
			long k = 0;
			for (; k < P && (k < k0 || k > k1); k += 16) {
				__m256i ml, mh;
				gp2v_bits16(m[k / 16], &ml, &mh);
				gp2c_shift_half(d + k, sp + k, ml, P - k, off + k, hw);
				if (k + 8 < P) gp2c_shift_half(d + k + 8, sp + k + 8, mh, P - k - 8, off + k + 8, hw);
			}
			for (; k <= k1; k += 16) {
				__m256i ml, mh;
				gp2v_bits16(m[k / 16], &ml, &mh);
				__m256 a = _mm256_and_ps(_mm256_loadu_ps(sp + k), _mm256_castsi256_ps(ml));
				__m256 b = _mm256_and_ps(_mm256_loadu_ps(sp + k + 8), _mm256_castsi256_ps(mh));
				_mm256_storeu_ps(d + k, _mm256_add_ps(_mm256_loadu_ps(d + k), a));
				_mm256_storeu_ps(d + k + 8, _mm256_add_ps(_mm256_loadu_ps(d + k + 8), b));
			}
			for (; k < P; k += 16) {
				__m256i ml, mh;
				gp2v_bits16(m[k / 16], &ml, &mh);
				gp2c_shift_half(d + k, sp + k, ml, P - k, off + k, hw);
				if (k + 8 < P) gp2c_shift_half(d + k + 8, sp + k + 8, mh, P - k - 8, off + k + 8, hw);
			}
		}
	}
}

// gp2_im2col is gp5_im2col (im2colRange).
static void gp2_im2col(const gp_geom *g, const float *x, float *col, long ld, int lo, int hi) {
	const int H = g->H, W = g->W, KH = g->KH, KW = g->KW, SH = g->SH, SW = g->SW, PH = g->PH, PW = g->PW;
	const int DH = g->DH, DW = g->DW, OH = g->OH, OW = g->OW;
	long row = (long)lo * KH * KW, hw = (long)H * W, P = (long)OH * OW;
	for (int c = lo; c < hi; c++) {
		const float *xc = x + c * hw;
		for (int i = 0; i < KH; i++) {
			for (int j = 0; j < KW; j++) {
				float *dst = col + row * ld;
				row++;
				int wlo, whi;
				gp2c_valid_range(W, OW, SW, PW, j * DW, &wlo, &whi);
				for (int oh = 0; oh < OH; oh++) {
					long at = (long)oh * OW;
					float *d = dst + at;
					int ih = oh * SH - PH + i * DH;
					if (ih < 0 || ih >= H) {
						gp2c_zero_line(d, OW, P - at);
						continue;
					}
					if (SW <= 2) {
						// base[ow*SW] is x[c, ih, ow*SW - PW + j*DW].
						const float *base = xc + (long)ih * W - PW + j * DW;
						if (SW == 1)
							gp2c_im2col_line(d, base, OW, wlo, whi, 1, P - at);
						else
							gp2c_im2col_line(d, base, OW, wlo, whi, 2, P - at);
						continue;
					}
					gp2c_zero(d, wlo);
					gp2c_zero(d + whi, OW - whi);
					const float *src = xc + (long)ih * W;
					int iw0 = wlo * SW - PW + j * DW;
					for (int ow = wlo, iw = iw0; ow < whi; ow++, iw += SW) d[ow] = src[iw];
				}
			}
		}
	}
}

// gp2c_add_s2 sets d[2t] += s[t] for t < n (a stride-2 col2im line), eight outputs per two
// vectors of d with s interleaved with +0: the odd pixels in between get +0 added, which
// leaves their bits (see gp2_col2im_shift: dx's pixels are never -0) and races with nothing
// (they are in the same channel's line). Nothing past d[2(n-1)] is touched.
static inline void gp2c_add_s2(float *d, const float *s, long n) {
	__m256 z = _mm256_setzero_ps();
	long t = 0;
	for (; t + 9 <= n; t += 8) {
		__m256 v = _mm256_loadu_ps(s + t);
		// unpack: s0 0 s1 0 | s4 0 s5 0 and s2 0 s3 0 | s6 0 s7 0; permute2f128 orders them.
		__m256 l = _mm256_unpacklo_ps(v, z), h = _mm256_unpackhi_ps(v, z);
		__m256 e0 = _mm256_permute2f128_ps(l, h, 0x20), e1 = _mm256_permute2f128_ps(l, h, 0x31);
		_mm256_storeu_ps(d + 2 * t, _mm256_add_ps(_mm256_loadu_ps(d + 2 * t), e0));
		_mm256_storeu_ps(d + 2 * t + 8, _mm256_add_ps(_mm256_loadu_ps(d + 2 * t + 8), e1));
	}
	if (t + 5 <= n) {
		__m256 v = _mm256_castps128_ps256(_mm_loadu_ps(s + t));
		__m256 l = _mm256_unpacklo_ps(v, z), h = _mm256_unpackhi_ps(v, z);
		__m256 e0 = _mm256_permute2f128_ps(l, h, 0x20);
		_mm256_storeu_ps(d + 2 * t, _mm256_add_ps(_mm256_loadu_ps(d + 2 * t), e0));
		t += 4;
	}
	for (; t < n; t++) d[2 * t] += s[t];
}

// gp2_col2im is gp5_col2im (col2imRange): channels [lo, hi) of dx are overwritten.
static void gp2_col2im(const gp_geom *g, const float *col, float *dx, long ld, int lo, int hi) {
	const int H = g->H, W = g->W, KH = g->KH, KW = g->KW, SH = g->SH, SW = g->SW, PH = g->PH, PW = g->PW;
	const int DH = g->DH, DW = g->DW, OH = g->OH, OW = g->OW;
	long hw = (long)H * W, row = (long)lo * KH * KW;
	gp2c_zero(dx + lo * hw, (hi - lo) * hw);
	for (int c = lo; c < hi; c++) {
		float *xc = dx + c * hw;
		for (int i = 0; i < KH; i++) {
			for (int j = 0; j < KW; j++) {
				const float *src = col + row * ld;
				row++;
				int wlo, whi;
				gp2c_valid_range(W, OW, SW, PW, j * DW, &wlo, &whi);
				for (int oh = 0; oh < OH; oh++) {
					int ih = oh * SH - PH + i * DH;
					if (ih < 0 || ih >= H) continue;
					const float *s = src + (long)oh * OW;
					float *d = xc + (long)ih * W;
					int iw = wlo * SW - PW + j * DW;
					if (SW == 1) {
						gp2c_add(d + iw, s + wlo, whi - wlo);
						continue;
					}
					if (SW == 2) {
						gp2c_add_s2(d + iw, s + wlo, whi - wlo);
						continue;
					}
					for (int ow = wlo; ow < whi; ow++, iw += SW) d[iw] += s[ow];
				}
			}
		}
	}
}

// gp2_im2col_gather is gp5_im2col_gather (im2colGather): kk kernel offsets, P output
// pixels, hw = H*W. Scalar loads, four per step: on Zen 4 they are 25-35% faster than
// AVX2's gather instruction, which is slower still on Zen 2 and on Intel CPUs with the
// gather data sampling microcode.
static void gp2_im2col_gather(const float *x, float *col, long ld, int lo, int hi, int kk, int P, long hw,
                             const int *gat, const int *padPos, const int *padOff) {
	for (int c = lo; c < hi; c++) {
		const float *xc = x + c * hw;
		for (int q = 0; q < kk; q++) {
			long r = (long)c * kk + q;
			const int *src = gat + (long)q * P;
			float *d = col + r * ld;
			int k = 0;
			for (; k + 4 <= P; k += 4) {
				float a = xc[src[k]], b = xc[src[k + 1]], e = xc[src[k + 2]], f = xc[src[k + 3]];
				d[k] = a;
				d[k + 1] = b;
				d[k + 2] = e;
				d[k + 3] = f;
			}
			for (; k < P; k++) d[k] = xc[src[k]];
			for (int t = padOff[q]; t < padOff[q + 1]; t++) d[padPos[t]] = 0;
		}
	}
}

// gp2_col2im_indexed_add is gp5_col2im_indexed_add (col2imIndexedAdd): rows of P columns
// (ld apart) summed into dx through idx (-1: padding), in order; scalar as at AVX-512 (AVX2
// has no scatter), four per step (10-25% faster than one).
static void gp2_col2im_indexed_add(const int *idx, long rows, int P, const float *col, float *dx, long ndx, long ld) {
	(void)ndx;
	for (long r = 0; r < rows; r++) {
		const float *s = col + r * ld;
		const int *ix = idx + r * P;
		int k = 0;
		for (; k + 4 <= P; k += 4) {
			int a = ix[k], b = ix[k + 1], e = ix[k + 2], f = ix[k + 3];
			if (a >= 0) dx[a] += s[k];
			if (b >= 0) dx[b] += s[k + 1];
			if (e >= 0) dx[e] += s[k + 2];
			if (f >= 0) dx[f] += s[k + 3];
		}
		for (; k < P; k++) {
			int j = ix[k];
			if (j >= 0) dx[j] += s[k];
		}
	}
}

// gp2_col_sums is gp5_col_sums (biasGrad's inner == 1 loop): db[o] = Σ over rows r of
// dy[r*c + o], rows added in order. Four rows per pass over db: ((db + r0) + r1) + r2 + r3
// is the Go loop's order, with a quarter of its loads and stores of db.
static void gp2_col_sums(const float *dy, long rows, long c, float *db) {
	gp2c_zero(db, c);
	long r = 0;
	for (; r + 4 <= rows; r += 4) {
		const float *a = dy + r * c, *b = a + c, *e = b + c, *f = e + c;
		long o = 0;
		for (; o + 8 <= c; o += 8) {
			__m256 v = _mm256_add_ps(_mm256_loadu_ps(db + o), _mm256_loadu_ps(a + o));
			v = _mm256_add_ps(v, _mm256_loadu_ps(b + o));
			v = _mm256_add_ps(v, _mm256_loadu_ps(e + o));
			_mm256_storeu_ps(db + o, _mm256_add_ps(v, _mm256_loadu_ps(f + o)));
		}
		for (; o < c; o++) db[o] = (((db[o] + a[o]) + b[o]) + e[o]) + f[o];
	}
	for (; r < rows; r++) gp2c_add(db, dy + r * c, c);
}

// gp2c_maxpool_one is gp5_maxpool's search of one window (rows [ih0, ih1), columns
// [iw0, iw1)): the first maximum, or the first NaN.
static inline int gp2c_maxpool_one(const float *xp, int W, int ih0, int ih1, int iw0, int iw1) {
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
				if (xp[ih * W + iw] != xp[ih * W + iw]) return ih * W + iw;
	}
	return best;
}

// gp2c_window_lanes is one window element for eight windows ow0+t, t < n, stride s (1 or 2):
// lane t is p[t*s]; nothing past p[(n-1)*s] is read (plain loads when n is 8).
static inline __m256 gp2c_window_lanes(const float *p, int s, long n) {
	if (n == 8) return gp2c_line8(p, 0, s);
	if (s == 1) return _mm256_maskload_ps(p, gp2v_m8(n));
	__m256 a = _mm256_maskload_ps(p, gp2v_m8(2 * n - 1));
	__m256 b = _mm256_maskload_ps(p + 8, gp2v_m8(2 * n - 9));
	return gp2c_even(a, b);
}

// gp2c_maxpool_vec is gp2c_maxpool_one for the n <= 8 windows ow0+t of one output line
// (rows [ih0, ih1)) whose columns are all inside the image, at stride s of 1 or 2, one lane
// per window, the window's elements visited in the scalar order: lane t's best moves only
// to a strictly greater value, so ties keep the first, as does NaN (which compares false);
// a second pass, only when a lane saw a NaN, finds the first NaN in those lanes. The
// geometry comes as values: read through g after the stores, it would be reloaded.
static inline void gp2c_maxpool_vec(const float *xp, float *yo, int *ao, int W, int KW, int s, int PW, int ih0,
                                   int ih1, int ow0, long n) {
	int w0 = ow0 * s - PW;
	__m256i lane = _mm256_mullo_epi32(gp2c_iota(), _mm256_set1_epi32(s));
	__m256 bv = gp2c_window_lanes(xp + ih0 * W + w0, s, n);
	__m256i best = _mm256_add_epi32(lane, _mm256_set1_epi32(ih0 * W + w0));
	__m256 nan = _mm256_setzero_ps();
	for (int ih = ih0; ih < ih1; ih++) {
		for (int j = 0; j < KW; j++) {
			int i = ih * W + w0 + j;
			__m256 v = gp2c_window_lanes(xp + i, s, n);
			__m256 gt = _mm256_cmp_ps(v, bv, _CMP_GT_OQ);
			nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
			bv = _mm256_blendv_ps(bv, v, gt);
			best = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best),
			                                            _mm256_castsi256_ps(_mm256_add_epi32(lane, _mm256_set1_epi32(i))), gt));
		}
	}
	if (_mm256_movemask_ps(nan)) {
		__m256 seen = _mm256_setzero_ps();
		for (int ih = ih0; ih < ih1; ih++) {
			for (int j = 0; j < KW; j++) {
				int i = ih * W + w0 + j;
				__m256 v = gp2c_window_lanes(xp + i, s, n);
				__m256 first = _mm256_andnot_ps(seen, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
				seen = _mm256_or_ps(seen, first);
				bv = _mm256_blendv_ps(bv, v, first);
				best = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best),
				                                            _mm256_castsi256_ps(_mm256_add_epi32(lane, _mm256_set1_epi32(i))), first));
			}
		}
	}
	// bv holds the element at best, bit for bit (it is assigned together with best).
	if (n == 8) {
		_mm256_storeu_si256((__m256i *)ao, best);
		if (yo) _mm256_storeu_ps(yo, bv);
	} else {
		gp2c_store_parti(ao, best, n);
		if (yo) gp2v_stp(yo, bv, n);
	}
}

// gp2_maxpool is gp5_maxpool (maxPoolSearch) for planes [lo, hi): each window's first
// maximum (or first NaN) into arg, its value into y unless y is NULL. At strides 1 and 2 the
// windows whose columns are all inside the image go eight at a time (gp2c_maxpool_vec); the
// others, and other strides, one at a time.
static void gp2_maxpool(const gp_geom *g, const float *x, float *y, int *arg, long lo, long hi) {
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
					for (; ow < vhi; ow += 8)
						gp2c_maxpool_vec(xp, yo ? yo + ow : 0, ao + ow, W, KW, SW, PW, ih0, ih1, ow,
						                 vhi - ow < 8 ? vhi - ow : 8);
					ow = vhi;
					if (ow >= OW) break;
				}
				int w0 = ow * SW - PW;
				int iw0 = w0 > 0 ? w0 : 0, iw1 = w0 + KW < W ? w0 + KW : W;
				int best = gp2c_maxpool_one(xp, W, ih0, ih1, iw0, iw1);
				ao[ow] = best;
				if (yo) yo[ow] = xp[best];
			}
		}
	}
}

// gp2_maxpool_scatter is gp5_maxpool_scatter (maxPool's gradient) for planes [lo, hi): dx
// (hw per plane) cleared, then dy (P per plane) added at each window's arg, in order (windows
// that share their maximum add into it in turn); four per step, 15-40% faster than one.
static void gp2_maxpool_scatter(const int *arg, const float *dy, float *dx, long lo, long hi, long P, long hw) {
	gp2c_zero(dx + lo * hw, (hi - lo) * hw);
	for (long pl = lo; pl < hi; pl++) {
		const int *ap = arg + pl * P;
		const float *dp = dy + pl * P;
		float *xp = dx + pl * hw;
		long o = 0;
		for (; o + 4 <= P; o += 4) {
			int a = ap[o], b = ap[o + 1], e = ap[o + 2], f = ap[o + 3];
			xp[a] += dp[o];
			xp[b] += dp[o + 1];
			xp[e] += dp[o + 2];
			xp[f] += dp[o + 3];
		}
		for (; o < P; o++) xp[ap[o]] += dp[o];
	}
}

// The GELU kernels are gp5_gelu_fwd and gp5_gelu_bwd (gelu32Fwd and gelu32Bwd), four double
// lanes at a time with the same operations in the same order, fused exactly where the
// AVX-512 ones fuse, so that both levels compute the same doubles.

// gp2c_fma is gp5_fma: the fused multiply-adds of both levels are the same ones.
static inline __m256d gp2c_fma(__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); }

// gp2c_estrin15 is c[0] + c[1]·u + ... + c[15]·u¹⁵ (a table of gelu_coef.h) in Estrin's
// form, as geluPoly and geluDPoly evaluate it.
static inline __m256d gp2c_estrin15(__m256d u, const double *c) {
	__m256d u2 = _mm256_mul_pd(u, u), u4 = _mm256_mul_pd(u2, u2), u8 = _mm256_mul_pd(u4, u4);
	__m256d p[8];
	for (int i = 0; i < 8; i++) p[i] = gp2c_fma(u, _mm256_set1_pd(c[2 * i + 1]), _mm256_set1_pd(c[2 * i]));
	return gp2c_fma(u8, gp2c_fma(u4, gp2c_fma(u2, p[7], p[6]), gp2c_fma(u2, p[5], p[4])),
		gp2c_fma(u4, gp2c_fma(u2, p[3], p[2]), gp2c_fma(u2, p[1], p[0])));
}

// gp2c_gelu_poly is geluPoly, gp2c_gelu_dpoly geluDPoly.
static inline __m256d gp2c_gelu_poly(__m256d u) { return gp2c_estrin15(u, gp_gelu_p); }
static inline __m256d gp2c_gelu_dpoly(__m256d u) { return gp2c_estrin15(u, gp_gelu_d); }

// gp2c_mills is gp5_mills (geluMills).
static inline __m256d gp2c_mills(__m256d a) {
	__m256d p = _mm256_set1_pd(0.02515635315459589);
	p = gp2c_fma(p, a, _mm256_set1_pd(0.1721106885180427));
	p = gp2c_fma(p, a, _mm256_set1_pd(0.6470467359482944));
	p = gp2c_fma(p, a, _mm256_set1_pd(1.311793834303858));
	p = gp2c_fma(p, a, _mm256_set1_pd(1.2542274946584864));
	__m256d q = _mm256_set1_pd(0.02515635084346288);
	q = gp2c_fma(q, a, _mm256_set1_pd(0.1721109201404783));
	q = gp2c_fma(q, a, _mm256_set1_pd(0.6721933477294133));
	q = gp2c_fma(q, a, _mm256_set1_pd(1.4841329201743));
	q = gp2c_fma(q, a, _mm256_set1_pd(1.847614733022324));
	q = gp2c_fma(q, a, _mm256_set1_pd(1.0));
	return _mm256_div_pd(p, q);
}

// gp2c_exp_neg_half_sq is gp5_exp_neg_half_sq (expNegHalfSq): exp(-a²/2) for 0 <= a <= 30.
// AVX-512's scalef by k becomes a product with 2^k built from its exponent bits: k is an
// integer in [-650, 0], so adding 2^52 + 1023 puts k + 1023 in the low mantissa bits, exactly,
// and shifting them into the exponent field gives the normal double 2^k; e·2^k is then exact,
// as scalef's result is.
static inline __m256d gp2c_exp_neg_half_sq(__m256d a) {
	__m256d s = _mm256_mul_pd(_mm256_mul_pd(_mm256_set1_pd(-0.5), a), a);
	__m256d k = _mm256_round_pd(_mm256_mul_pd(s, _mm256_set1_pd(1.4426950408889634)),
	                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(6.93147180369123816490e-01), s);
	r = _mm256_fnmadd_pd(k, _mm256_set1_pd(1.90821492927058770002e-10), r);
	__m256d r2 = _mm256_mul_pd(r, r), r4 = _mm256_mul_pd(r2, r2);
	__m256d a0 = _mm256_add_pd(_mm256_set1_pd(1), r);
	__m256d a1 = gp2c_fma(r, _mm256_set1_pd(1.0 / 6), _mm256_set1_pd(1.0 / 2));
	__m256d b0 = gp2c_fma(r, _mm256_set1_pd(1.0 / 120), _mm256_set1_pd(1.0 / 24));
	__m256d b1 = gp2c_fma(r, _mm256_set1_pd(1.0 / 5040), _mm256_set1_pd(1.0 / 720));
	__m256d e = gp2c_fma(r4, gp2c_fma(r4, _mm256_set1_pd(1.0 / 40320), gp2c_fma(r2, b1, b0)), gp2c_fma(r2, a1, a0));
	__m256i bits = _mm256_slli_epi64(_mm256_castpd_si256(_mm256_add_pd(k, _mm256_set1_pd(4503599627370496.0 + 1023))), 52);
	return _mm256_mul_pd(e, _mm256_castsi256_pd(bits));
}

static const double gp2c_inv_sqrt_2pi = 0.3989422804014327;

static inline __m256d gp2c_abs(__m256d v) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), v); }

// gp2c_gelu4 is v·Φ(v) for four lanes (gp5_gelu_fwd's body); blendv selects by v's sign bit
// as the AVX-512 blend by movepi64_mask does.
static inline __m256d gp2c_gelu4(__m256d v) {
	__m256d a = gp2c_abs(v);
	__m256d p = _mm256_add_pd(_mm256_set1_pd(0.5), _mm256_mul_pd(v, gp2c_gelu_poly(_mm256_mul_pd(v, v))));
	__m256d tail = _mm256_cmp_pd(a, _mm256_set1_pd(3.0), _CMP_NLT_UQ);
	if (_mm256_movemask_pd(tail)) {
		__m256d ac = _mm256_min_pd(_mm256_set1_pd(30.0), a);
		__m256d t = _mm256_mul_pd(_mm256_mul_pd(gp2c_exp_neg_half_sq(ac), _mm256_set1_pd(gp2c_inv_sqrt_2pi)), gp2c_mills(ac));
		__m256d sel = _mm256_blendv_pd(_mm256_sub_pd(_mm256_set1_pd(1), t), t, v);
		p = _mm256_blendv_pd(p, sel, tail);
	}
	return _mm256_mul_pd(v, p);
}

// gp2c_gelu_d4 is GELU'(v) for four lanes (gp5_gelu_bwd's body).
static inline __m256d gp2c_gelu_d4(__m256d v) {
	__m256d a = gp2c_abs(v);
	__m256d d = _mm256_add_pd(_mm256_set1_pd(0.5), _mm256_mul_pd(v, gp2c_gelu_dpoly(_mm256_mul_pd(v, v))));
	__m256d tail = _mm256_cmp_pd(a, _mm256_set1_pd(3.0), _CMP_NLT_UQ);
	if (_mm256_movemask_pd(tail)) {
		__m256d ac = _mm256_min_pd(_mm256_set1_pd(30.0), a);
		__m256d pdf = _mm256_mul_pd(gp2c_exp_neg_half_sq(ac), _mm256_set1_pd(gp2c_inv_sqrt_2pi));
		__m256d t = _mm256_mul_pd(pdf, gp2c_mills(ac));
		__m256d sel = _mm256_blendv_pd(_mm256_sub_pd(_mm256_set1_pd(1), t), t, v);
		__m256d sa = _mm256_blendv_pd(ac, _mm256_sub_pd(_mm256_setzero_pd(), ac), v);
		__m256d dt = _mm256_add_pd(sel, _mm256_mul_pd(sa, pdf));
		d = _mm256_blendv_pd(d, dt, tail);
	}
	return d;
}

// gp2c_lo_pd, gp2c_hi_pd and gp2c_ps convert eight floats to two vectors of doubles and back.
static inline __m256d gp2c_lo_pd(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
static inline __m256d gp2c_hi_pd(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
static inline __m256 gp2c_ps(__m256d lo, __m256d hi) {
	return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}

// gp2_gelu_fwd is gp5_gelu_fwd (gelu32Fwd): y[i] = x[i]·Φ(x[i]); masked-off lanes of the
// last vector load 0 and are not stored.
static void gp2_gelu_fwd(const float *x, float *y, long n) {
	for (long i = 0; i < n; i += 8) {
		__m256 xv = i + 8 <= n ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, gp2v_m8(n - i));
		__m256 r = gp2c_ps(gp2c_gelu4(gp2c_lo_pd(xv)), gp2c_gelu4(gp2c_hi_pd(xv)));
		if (i + 8 <= n)
			_mm256_storeu_ps(y + i, r);
		else
			gp2v_stp(y + i, r, n - i);
	}
}

// gp2_gelu_bwd is gp5_gelu_bwd (gelu32Bwd): dx[i] = dy[i]·GELU'(x[i]).
static void gp2_gelu_bwd(const float *x, const float *dy, float *dx, long n) {
	for (long i = 0; i < n; i += 8) {
		__m256 xv, gv;
		if (i + 8 <= n) {
			xv = _mm256_loadu_ps(x + i);
			gv = _mm256_loadu_ps(dy + i);
		} else {
			__m256i m = gp2v_m8(n - i);
			xv = _mm256_maskload_ps(x + i, m);
			gv = _mm256_maskload_ps(dy + i, m);
		}
		__m256d lo = _mm256_mul_pd(gp2c_lo_pd(gv), gp2c_gelu_d4(gp2c_lo_pd(xv)));
		__m256d hi = _mm256_mul_pd(gp2c_hi_pd(gv), gp2c_gelu_d4(gp2c_hi_pd(xv)));
		__m256 r = gp2c_ps(lo, hi);
		if (i + 8 <= n)
			_mm256_storeu_ps(dx + i, r);
		else
			gp2v_stp(dx + i, r, n - i);
	}
}

#pragma GCC pop_options
