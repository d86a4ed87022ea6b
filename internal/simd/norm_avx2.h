// AVX2+FMA kernels of the normalisations (norm_kernels.go, norm_layer.go) and ReLU
// (act_unary.go) of nn/ops, for conv_cgo.go at level AVX2: each is the gp5_ function of
// norm_avx512.h named in its comment, with the same results bit for bit. The AVX-512
// reductions accumulate in double in eight lanes (one __m512d); here the same eight lanes are
// two __m256d (elements 0-3 and 4-7 of each group of eight), with the same operations per
// lane and the same horizontal order at the end (gp2v_hsum), so the sums are the AVX-512
// ones exactly. The elementwise float32 formulas round like Go's (no fused multiply-adds:
// the pragma keeps the compiler from contracting). Tails touch no memory past the last
// element, as the AVX-512 masks: masked loads, and partial stores (gp2v_stp) rather than
// masked ones, since vmaskmovps to memory is microcoded on AMD's cores (about 20 cycles on
// Zen 4, against one for a plain store).

#include <immintrin.h>
#include "avx2_common.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")

// gp2n_stv stores v whole when r >= 8, else its first r floats (an elementwise loop's last
// one or two vectors).
static inline void gp2n_stv(float *p, __m256 v, long r) {
	if (r >= 8)
		_mm256_storeu_ps(p, v);
	else
		gp2v_stp(p, v, r);
}

// gp2n_std stores four doubles (the first r unless full).
static inline __attribute__((always_inline)) void gp2n_std(double *p, int full, long r, __m256d v) {
	if (full)
		_mm256_storeu_pd(p, v);
	else
		gp2v_stpd(p, v, r);
}

// gp2n_st8 rounds eight doubles (lo: elements 0-3, hi: 4-7) to floats and stores them (the
// first r unless full).
static inline __attribute__((always_inline)) void gp2n_st8(float *p, int full, long r, __m256d lo, __m256d hi) {
	__m256 v = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
	if (full)
		_mm256_storeu_ps(p, v);
	else
		gp2v_stp(p, v, r);
}

// gp2n_sq8 is one group of eight of gp5_sum_sq: a[0..1] += x, a[2..3] += x² (fused).
static inline __attribute__((always_inline)) void gp2n_sq8(const float *p, int full, __m128i m0, __m128i m1, __m256d *a) {
	__m256d v0 = gp2v_ld4(p, full, m0), v1 = gp2v_ld4(p + 4, full, m1);
	a[0] = _mm256_add_pd(a[0], v0);
	a[1] = _mm256_add_pd(a[1], v1);
	a[2] = _mm256_fmadd_pd(v0, v0, a[2]);
	a[3] = _mm256_fmadd_pd(v1, v1, a[3]);
}

// gp2n_ld4s is gp2v_ld4 of d, with sel (not NULL) each float kept only where sel's bits
// are positive as an int32, else +0 (reluBits32's mask; masked lanes of sel read as 0).
static inline __attribute__((always_inline)) __m256d gp2n_ld4s(const float *d, const float *sel, int full,
                                                              __m128i m) {
	if (!sel) return gp2v_ld4(d, full, m);
	__m128 v = full ? _mm_loadu_ps(d) : _mm_maskload_ps(d, m);
	__m128i k = full ? _mm_loadu_si128((const __m128i *)sel) : _mm_castps_si128(_mm_maskload_ps(sel, m));
	return _mm256_cvtps_pd(_mm_and_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(k, _mm_setzero_si128())), v));
}

// gp2n_dot8 is one group of eight of gp5_sum_dot: a[0..1] += d, a[2..3] += d·x (fused), d
// masked by sel unless NULL.
static inline __attribute__((always_inline)) void gp2n_dot8(const float *d, const float *x, const float *sel,
                                                           int full, __m128i m0, __m128i m1, __m256d *a) {
	__m256d g0 = gp2n_ld4s(d, sel, full, m0), g1 = gp2n_ld4s(d + 4, sel ? sel + 4 : 0, full, m1);
	a[0] = _mm256_add_pd(a[0], g0);
	a[1] = _mm256_add_pd(a[1], g1);
	a[2] = _mm256_fmadd_pd(g0, gp2v_ld4(x, full, m0), a[2]);
	a[3] = _mm256_fmadd_pd(g1, gp2v_ld4(x + 4, full, m1), a[3]);
}

// gp2n_sums2 is gp5_sum_sq (sumSq: Σ x, Σ x²) of the planes x and y when !dot, or
// gp5_sum_dot (sumDot: Σ d, Σ d·x) of the pairs (d, x) and (e, y) when dot, d and e masked
// by sd and se unless NULL (gp2n_ld4s), each n long:
// r[0..1] for the first plane, r[2..3] for the second (when single, only the first: y and
// e unused). Each lane's sum is a chain of dependent additions, one per group of eight; two
// independent planes at once keep twice as many in flight without changing either plane's
// order.
static inline __attribute__((always_inline)) void gp2n_sums2(int dot, int single, const float *d, const float *x,
                                                            const float *e, const float *y, const float *sd,
                                                            const float *se, long n, double *r) {
	__m256d a[4], b[4];
	for (int i = 0; i < 4; i++) a[i] = b[i] = _mm256_setzero_pd();
	__m128i z = _mm_setzero_si128();
	long i = 0;
	for (; i + 8 <= n; i += 8) {
		if (dot) {
			gp2n_dot8(d + i, x + i, sd ? sd + i : 0, 1, z, z, a);
			if (!single) gp2n_dot8(e + i, y + i, se ? se + i : 0, 1, z, z, b);
		} else {
			gp2n_sq8(x + i, 1, z, z, a);
			if (!single) gp2n_sq8(y + i, 1, z, z, b);
		}
	}
	if (i < n) {
		__m128i m0 = gp2v_m4(n - i), m1 = gp2v_m4(n - i - 4);
		if (dot) {
			gp2n_dot8(d + i, x + i, sd ? sd + i : 0, 0, m0, m1, a);
			if (!single) gp2n_dot8(e + i, y + i, se ? se + i : 0, 0, m0, m1, b);
		} else {
			gp2n_sq8(x + i, 0, m0, m1, a);
			if (!single) gp2n_sq8(y + i, 0, m0, m1, b);
		}
	}
	r[0] = gp2v_hsum(a[0], a[1]);
	r[1] = gp2v_hsum(a[2], a[3]);
	if (!single) {
		r[2] = gp2v_hsum(b[0], b[1]);
		r[3] = gp2v_hsum(b[2], b[3]);
	}
}

// gp2_bn_sums is gp5_bn_sums (bnSums) for channels [lo, hi) of x [n, c, hw], image by image
// as gp5_bn_sums but two images at a time, each channel's two planes summed together and
// added in sample order.
static void gp2_bn_sums(const float *x, long n, long c, long hw, long lo, long hi, double *sum, double *sq) {
	double r[4];
	for (long ch = lo; ch < hi; ch++) sum[ch] = sq[ch] = 0;
	long i = 0;
	for (; i + 2 <= n; i += 2) {
		for (long ch = lo; ch < hi; ch++) {
			gp2n_sums2(0, 0, 0, x + (i * c + ch) * hw, 0, x + ((i + 1) * c + ch) * hw, 0, 0, hw, r);
			sum[ch] += r[0];
			sq[ch] += r[1];
			sum[ch] += r[2];
			sq[ch] += r[3];
		}
	}
	if (i < n) {
		for (long ch = lo; ch < hi; ch++) {
			gp2n_sums2(0, 1, 0, x + (i * c + ch) * hw, 0, 0, 0, 0, hw, r);
			sum[ch] += r[0];
			sq[ch] += r[1];
		}
	}
}

// gp2n_bn_grad_sums is gp2_bn_grad_sums's body, sel NULL or not (inlined as each).
static inline __attribute__((always_inline)) void gp2n_bn_grad_sums(const float *x, const float *dy, const float *sel,
                                                                   long n, long c, long hw, long lo, long hi,
                                                                   const double *mean, double *sdy, double *sdyx) {
	double r[4];
	for (long ch = lo; ch < hi; ch++) sdy[ch] = sdyx[ch] = 0;
	long i = 0;
	for (; i + 2 <= n; i += 2) {
		for (long ch = lo; ch < hi; ch++) {
			long off = (i * c + ch) * hw, off2 = ((i + 1) * c + ch) * hw;
			gp2n_sums2(1, 0, dy + off, x + off, dy + off2, x + off2, sel ? sel + off : 0, sel ? sel + off2 : 0, hw, r);
			sdy[ch] += r[0];
			sdyx[ch] += r[1] - mean[ch] * r[0];
			sdy[ch] += r[2];
			sdyx[ch] += r[3] - mean[ch] * r[2];
		}
	}
	if (i < n) {
		for (long ch = lo; ch < hi; ch++) {
			long off = (i * c + ch) * hw;
			gp2n_sums2(1, 1, dy + off, x + off, 0, 0, sel ? sel + off : 0, 0, hw, r);
			sdy[ch] += r[0];
			sdyx[ch] += r[1] - mean[ch] * r[0];
		}
	}
}

// gp2_bn_grad_sums is gp5_bn_grad_sums (bnGradSums, dy masked by sel unless NULL) for
// channels [lo, hi), planes in pairs as gp2_bn_sums.
static void gp2_bn_grad_sums(const float *x, const float *dy, const float *sel, long n, long c, long hw, long lo,
                             long hi, const double *mean, double *sdy, double *sdyx) {
	if (sel)
		gp2n_bn_grad_sums(x, dy, sel, n, c, hw, lo, hi, mean, sdy, sdyx);
	else
		gp2n_bn_grad_sums(x, dy, 0, n, c, hw, lo, hi, mean, sdy, sdyx);
}

// gp2n_relu8 keeps v where the int32 bits of s are positive, else +0.
static inline __m256 gp2n_relu8(__m256 v, __m256i s) {
	return _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(s, _mm256_setzero_si256())), v);
}

// gp2_relu_sel is gp5_relu_sel (reluBits32 with sel): keep v where sel's bits are positive as
// an int32.
static void gp2_relu_sel(const float *v, float *y, const float *sel, long n) {
	long i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 a = gp2n_relu8(_mm256_loadu_ps(v + i), _mm256_loadu_si256((const __m256i *)(sel + i)));
		__m256 b = gp2n_relu8(_mm256_loadu_ps(v + i + 8), _mm256_loadu_si256((const __m256i *)(sel + i + 8)));
		_mm256_storeu_ps(y + i, a);
		_mm256_storeu_ps(y + i + 8, b);
	}
	for (; i < n; i += 8) {
		__m256i m = gp2v_m8(n - i);
		__m256 a = gp2n_relu8(_mm256_maskload_ps(v + i, m), _mm256_castps_si256(_mm256_maskload_ps(sel + i, m)));
		gp2n_stv(y + i, a, n - i);
	}
}

// gp2_scale is gp5_scale (applyMask's kept run): y = x·s, one rounding as the Go loop.
static void gp2_scale(const float *x, float *y, long n, float s) {
	__m256 sv = _mm256_set1_ps(s);
	long i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 a = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv), b = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8), sv);
		_mm256_storeu_ps(y + i, a);
		_mm256_storeu_ps(y + i + 8, b);
	}
	for (; i < n; i += 8) gp2n_stv(y + i, _mm256_mul_ps(_mm256_maskload_ps(x + i, gp2v_m8(n - i)), sv), n - i);
}

// gp2n_bn8 is one vector of bnApply: x·sa + sb rounded twice, then ReLU (+0 unless the bits
// are positive) when relu.
static inline __attribute__((always_inline)) __m256 gp2n_bn8(__m256 x, __m256 sa, __m256 sb, int relu) {
	__m256 v = _mm256_add_ps(_mm256_mul_ps(x, sa), sb);
	return relu ? gp2n_relu8(v, _mm256_castps_si256(v)) : v;
}

// gp2n_bn_row is gp5_bn_apply's loop over one row of hw.
static inline __attribute__((always_inline)) void gp2n_bn_row(const float *row, float *out, long hw, __m256 sa,
                                                             __m256 sb, int relu) {
	long j = 0;
	for (; j + 16 <= hw; j += 16) {
		__m256 a = gp2n_bn8(_mm256_loadu_ps(row + j), sa, sb, relu);
		__m256 b = gp2n_bn8(_mm256_loadu_ps(row + j + 8), sa, sb, relu);
		_mm256_storeu_ps(out + j, a);
		_mm256_storeu_ps(out + j + 8, b);
	}
	for (; j < hw; j += 8) {
		__m256i m = gp2v_m8(hw - j);
		gp2n_stv(out + j, gp2n_bn8(_mm256_maskload_ps(row + j, m), sa, sb, relu), hw - j);
	}
}

// gp2_bn_apply is gp5_bn_apply (bnApply) for rows [lo, hi) (row r is channel r % c):
// y = x·sa + sb, then ReLU when relu.
static void gp2_bn_apply(const float *x, float *y, long c, long hw, long lo, long hi, const double *mean,
                         const double *istd, const double *gamma, const double *beta, int relu) {
	for (long r = lo; r < hi; r++) {
		long ch = r % c;
		double a = gamma[ch] * istd[ch];
		__m256 sa = _mm256_set1_ps((float)a), sb = _mm256_set1_ps((float)(beta[ch] - mean[ch] * a));
		if (relu)
			gp2n_bn_row(x + r * hw, y + r * hw, hw, sa, sb, 1);
		else
			gp2n_bn_row(x + r * hw, y + r * hw, hw, sa, sb, 0);
	}
}

// gp2n_bng8 is one vector of bnGradApply: a·dy, then + b·x, + d unless only.
static inline __attribute__((always_inline)) __m256 gp2n_bng8(__m256 dy, __m256 x, __m256 a, __m256 b, __m256 d,
                                                             int only) {
	__m256 v = _mm256_mul_ps(a, dy);
	return only ? v : _mm256_add_ps(_mm256_add_ps(v, _mm256_mul_ps(b, x)), d);
}

// gp2n_ld8s loads eight floats of dy (those m selects unless full), with sel (not NULL) each kept only where sel's bits are positive as an
// int32, else +0 (reluBits32's mask).
static inline __attribute__((always_inline)) __m256 gp2n_ld8s(const float *dy, const float *sel, int full, __m256i m) {
	__m256 v = full ? _mm256_loadu_ps(dy) : _mm256_maskload_ps(dy, m);
	if (!sel) return v;
	return gp2n_relu8(v, full ? _mm256_loadu_si256((const __m256i *)sel) : _mm256_castps_si256(_mm256_maskload_ps(sel, m)));
}

// gp2n_bng_row is gp5_bn_grad_apply's loop over one row of hw, dy masked by sel unless NULL.
static inline __attribute__((always_inline)) void gp2n_bng_row(const float *x, const float *dy, const float *sel,
                                                              float *dx, long hw, __m256 a, __m256 b, __m256 d,
                                                              int only) {
	long j = 0;
	__m256i z = _mm256_setzero_si256();
	for (; j + 16 <= hw; j += 16) {
		__m256 u = gp2n_bng8(gp2n_ld8s(dy + j, sel ? sel + j : 0, 1, z), only ? a : _mm256_loadu_ps(x + j), a, b, d, only);
		__m256 w = gp2n_bng8(gp2n_ld8s(dy + j + 8, sel ? sel + j + 8 : 0, 1, z), only ? a : _mm256_loadu_ps(x + j + 8),
		                     a, b, d, only);
		_mm256_storeu_ps(dx + j, u);
		_mm256_storeu_ps(dx + j + 8, w);
	}
	for (; j < hw; j += 8) {
		__m256i m = gp2v_m8(hw - j);
		__m256 u = gp2n_bng8(gp2n_ld8s(dy + j, sel ? sel + j : 0, 0, m), only ? a : _mm256_maskload_ps(x + j, m), a, b,
		                     d, only);
		gp2n_stv(dx + j, u, hw - j);
	}
}

// gp2n_bn_grad_apply is gp2_bn_grad_apply's body, sel NULL or not (inlined as each).
static inline __attribute__((always_inline)) void gp2n_bn_grad_apply(const float *x, const float *dy, const float *sel,
                                                                    float *dx, long c, long hw, long lo, long hi,
                                                                    const double *k1, const double *k2,
                                                                    const double *k3) {
	for (long r = lo; r < hi; r++) {
		long ch = r % c, off = r * hw;
		float af = (float)k1[ch], bf = (float)k2[ch], df = (float)k3[ch];
		__m256 a = _mm256_set1_ps(af), b = _mm256_set1_ps(bf), d = _mm256_set1_ps(df);
		const float *s = sel ? sel + off : 0;
		if (bf == 0 && df == 0)
			gp2n_bng_row(x + off, dy + off, s, dx + off, hw, a, b, d, 1);
		else
			gp2n_bng_row(x + off, dy + off, s, dx + off, hw, a, b, d, 0);
	}
}

// gp2_bn_grad_apply is gp5_bn_grad_apply (bnGradApply) for rows [lo, hi):
// dx = k1·dy + k2·x + k3, dy masked by sel unless NULL; x is not read when k2 and k3 round
// to 0.
static void gp2_bn_grad_apply(const float *x, const float *dy, const float *sel, float *dx, long c, long hw, long lo,
                              long hi, const double *k1, const double *k2, const double *k3) {
	if (sel)
		gp2n_bn_grad_apply(x, dy, sel, dx, c, hw, lo, hi, k1, k2, k3);
	else
		gp2n_bn_grad_apply(x, dy, 0, dx, c, hw, lo, hi, k1, k2, k3);
}

// gp2n_ln_out is one group of eight of gp5_ln_fwd's last loop: y = (x - mu)·istd·gamma +
// beta (the first r elements unless full).
static inline __attribute__((always_inline)) void gp2n_ln_out(const float *x, float *y, const double *gamma,
                                                             const double *beta, int full, long r, __m128i m0,
                                                             __m128i m1, __m256d mv, __m256d iv) {
	__m256d t0 = _mm256_mul_pd(_mm256_mul_pd(_mm256_sub_pd(gp2v_ld4(x, full, m0), mv), iv), gp2v_ldd(gamma, full, m0));
	__m256d t1 = _mm256_mul_pd(_mm256_mul_pd(_mm256_sub_pd(gp2v_ld4(x + 4, full, m1), mv), iv), gp2v_ldd(gamma + 4, full, m1));
	t0 = _mm256_add_pd(t0, gp2v_ldd(beta, full, m0));
	t1 = _mm256_add_pd(t1, gp2v_ldd(beta + 4, full, m1));
	gp2n_st8(y, full, r, t0, t1);
}

// gp2n_ln_fwd_rows is gp5_ln_fwd's body for P (1 or 2) consecutive rows of m from x, the
// tail (elements jt..m-1) with the masks m0, m1. Two rows go through each loop together: a
// row's sums are chains of dependent additions, short rows (swin's 96 channels: 12 groups)
// leave the CPU waiting on them and on the square root and division between the loops, and
// a second, independent row fills those waits; each row's operations and their order are
// unchanged.
static inline __attribute__((always_inline)) void gp2n_ln_fwd_rows(int P, const float *x, float *y, long m, long jt,
                                                                  __m128i m0, __m128i m1, const double *gamma,
                                                                  const double *beta, double eps, double *mean,
                                                                  double *istd) {
	__m256d s[2][2], mv[2], iv[2];
	for (int q = 0; q < P; q++) s[q][0] = s[q][1] = _mm256_setzero_pd();
	long j = 0;
	for (; j < jt; j += 8)
		for (int q = 0; q < P; q++) {
			s[q][0] = _mm256_add_pd(s[q][0], gp2v_ld4(x + q * m + j, 1, m0));
			s[q][1] = _mm256_add_pd(s[q][1], gp2v_ld4(x + q * m + j + 4, 1, m1));
		}
	if (jt < m)
		for (int q = 0; q < P; q++) {
			s[q][0] = _mm256_add_pd(s[q][0], gp2v_ld4(x + q * m + jt, 0, m0));
			s[q][1] = _mm256_add_pd(s[q][1], gp2v_ld4(x + q * m + jt + 4, 0, m1));
		}
	for (int q = 0; q < P; q++) {
		mean[q] = gp2v_hsum(s[q][0], s[q][1]) / (double)m;
		mv[q] = _mm256_set1_pd(mean[q]);
		s[q][0] = s[q][1] = _mm256_setzero_pd();
	}
	for (j = 0; j < jt; j += 8)
		for (int q = 0; q < P; q++) {
			__m256d d0 = _mm256_sub_pd(gp2v_ld4(x + q * m + j, 1, m0), mv[q]);
			__m256d d1 = _mm256_sub_pd(gp2v_ld4(x + q * m + j + 4, 1, m1), mv[q]);
			s[q][0] = _mm256_fmadd_pd(d0, d0, s[q][0]);
			s[q][1] = _mm256_fmadd_pd(d1, d1, s[q][1]);
		}
	if (jt < m)
		for (int q = 0; q < P; q++) {
			// As _mm512_maskz_sub_pd: the lanes past m are 0, not 0 - mean.
			__m256d d0 = _mm256_and_pd(_mm256_sub_pd(gp2v_ld4(x + q * m + jt, 0, m0), mv[q]), _mm256_castsi256_pd(gp2v_w(m0)));
			__m256d d1 = _mm256_and_pd(_mm256_sub_pd(gp2v_ld4(x + q * m + jt + 4, 0, m1), mv[q]), _mm256_castsi256_pd(gp2v_w(m1)));
			s[q][0] = _mm256_fmadd_pd(d0, d0, s[q][0]);
			s[q][1] = _mm256_fmadd_pd(d1, d1, s[q][1]);
		}
	for (int q = 0; q < P; q++) {
		double var = gp2v_hsum(s[q][0], s[q][1]) / (double)m + eps;
		istd[q] = 1 / _mm_cvtsd_f64(_mm_sqrt_sd(_mm_set_sd(var), _mm_set_sd(var)));
		iv[q] = _mm256_set1_pd(istd[q]);
	}
	for (j = 0; j < jt; j += 8)
		for (int q = 0; q < P; q++) gp2n_ln_out(x + q * m + j, y + q * m + j, gamma + j, beta + j, 1, 8, m0, m1, mv[q], iv[q]);
	if (jt < m)
		for (int q = 0; q < P; q++)
			gp2n_ln_out(x + q * m + jt, y + q * m + jt, gamma + jt, beta + jt, 0, m - jt, m0, m1, mv[q], iv[q]);
}

// gp2_ln_fwd is gp5_ln_fwd (lnForward's loop) for rows [lo, hi) of m elements, two rows at
// a time.
static void gp2_ln_fwd(const float *x, float *y, long lo, long hi, long m, const double *gamma, const double *beta,
                       double eps, double *mean, double *istd) {
	long jt = m & ~7L, r = lo;
	__m128i m0 = gp2v_m4(m - jt), m1 = gp2v_m4(m - jt - 4);
	for (; r + 2 <= hi; r += 2) gp2n_ln_fwd_rows(2, x + r * m, y + r * m, m, jt, m0, m1, gamma, beta, eps, mean + r, istd + r);
	if (r < hi) gp2n_ln_fwd_rows(1, x + r * m, y + r * m, m, jt, m0, m1, gamma, beta, eps, mean + r, istd + r);
}

// gp2n_ln_grad is one group of eight of gp5_ln_bwd's first loop for one row: the gamma
// and beta gradients added into dgamma and dbeta, Σ dy·gamma into a[0..1] and
// Σ dy·gamma·xh into a[2..3], with xh = (x - mean)·istd whose lanes past m (0 - mean) are
// cleared before the product by istd, as _mm512_maskz_sub_pd does.
static inline __attribute__((always_inline)) void gp2n_ln_grad(const float *x, const float *g, const double *gamma,
                                                              double *dgamma, double *dbeta, int full, long r,
                                                              __m128i m0, __m128i m1, __m256d mv, __m256d iv,
                                                              __m256d *a) {
	__m256d x0 = _mm256_sub_pd(gp2v_ld4(x, full, m0), mv), x1 = _mm256_sub_pd(gp2v_ld4(x + 4, full, m1), mv);
	if (!full) {
		x0 = _mm256_and_pd(x0, _mm256_castsi256_pd(gp2v_w(m0)));
		x1 = _mm256_and_pd(x1, _mm256_castsi256_pd(gp2v_w(m1)));
	}
	x0 = _mm256_mul_pd(x0, iv);
	x1 = _mm256_mul_pd(x1, iv);
	__m256d g0 = gp2v_ld4(g, full, m0), g1 = gp2v_ld4(g + 4, full, m1);
	gp2n_std(dgamma, full, r, _mm256_fmadd_pd(g0, x0, gp2v_ldd(dgamma, full, m0)));
	gp2n_std(dgamma + 4, full, r - 4, _mm256_fmadd_pd(g1, x1, gp2v_ldd(dgamma + 4, full, m1)));
	gp2n_std(dbeta, full, r, _mm256_add_pd(g0, gp2v_ldd(dbeta, full, m0)));
	gp2n_std(dbeta + 4, full, r - 4, _mm256_add_pd(g1, gp2v_ldd(dbeta + 4, full, m1)));
	__m256d gg0 = _mm256_mul_pd(g0, gp2v_ldd(gamma, full, m0)), gg1 = _mm256_mul_pd(g1, gp2v_ldd(gamma + 4, full, m1));
	a[0] = _mm256_add_pd(a[0], gg0);
	a[1] = _mm256_add_pd(a[1], gg1);
	a[2] = _mm256_fmadd_pd(gg0, x0, a[2]);
	a[3] = _mm256_fmadd_pd(gg1, x1, a[3]);
}

// gp2n_ln_sums is gp5_ln_bwd's first loop for one row: returns Σ dy·gamma / m in *av and
// Σ dy·gamma·xh / m in *bv.
static inline __attribute__((always_inline)) void gp2n_ln_sums(const float *x, const float *g, long m, long jt,
                                                              __m128i m0, __m128i m1, const double *gamma,
                                                              __m256d mv, __m256d iv, double *dgamma, double *dbeta,
                                                              __m256d *av, __m256d *bv) {
	__m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
	long j = 0;
	for (; j < jt; j += 8) gp2n_ln_grad(x + j, g + j, gamma + j, dgamma + j, dbeta + j, 1, 8, m0, m1, mv, iv, a);
	if (jt < m) gp2n_ln_grad(x + jt, g + jt, gamma + jt, dgamma + jt, dbeta + jt, 0, m - jt, m0, m1, mv, iv, a);
	*av = _mm256_set1_pd(gp2v_hsum(a[0], a[1]) / (double)m);
	*bv = _mm256_set1_pd(gp2v_hsum(a[2], a[3]) / (double)m);
}

// gp2n_ln_dx is one group of eight of gp5_ln_bwd's second loop:
// dx = istd·((dy·gamma - av) - xh·bv).
static inline __attribute__((always_inline)) void gp2n_ln_dx(const float *x, const float *g, const double *gamma, float *d,
                                                            int full, long r, __m128i m0, __m128i m1, __m256d mv,
                                                            __m256d iv, __m256d av, __m256d bv) {
	__m256d x0 = _mm256_mul_pd(_mm256_sub_pd(gp2v_ld4(x, full, m0), mv), iv);
	__m256d x1 = _mm256_mul_pd(_mm256_sub_pd(gp2v_ld4(x + 4, full, m1), mv), iv);
	__m256d t0 = _mm256_sub_pd(_mm256_sub_pd(_mm256_mul_pd(gp2v_ld4(g, full, m0), gp2v_ldd(gamma, full, m0)), av),
	                           _mm256_mul_pd(x0, bv));
	__m256d t1 = _mm256_sub_pd(_mm256_sub_pd(_mm256_mul_pd(gp2v_ld4(g + 4, full, m1), gp2v_ldd(gamma + 4, full, m1)), av),
	                           _mm256_mul_pd(x1, bv));
	gp2n_st8(d, full, r, _mm256_mul_pd(iv, t0), _mm256_mul_pd(iv, t1));
}

// gp2_ln_bwd is gp5_ln_bwd (one block of lnBackward): rows [r0, r1), their gamma and beta
// gradients added into dgamma and dbeta (m each), dx written. (Unlike gp2_ln_fwd, one row at
// a time: pairing rows measured slower here.)
static void gp2_ln_bwd(const float *x, const float *dy, float *dx, long r0, long r1, long m, const double *gamma,
                       const double *mean, const double *istd, double *dgamma, double *dbeta) {
	long jt = m & ~7L;
	__m128i m0 = gp2v_m4(m - jt), m1 = gp2v_m4(m - jt - 4);
	for (long r = r0; r < r1; r++) {
		const float *xr = x + r * m, *g = dy + r * m;
		float *d = dx + r * m;
		__m256d mv = _mm256_set1_pd(mean[r]), iv = _mm256_set1_pd(istd[r]), av, bv;
		gp2n_ln_sums(xr, g, m, jt, m0, m1, gamma, mv, iv, dgamma, dbeta, &av, &bv);
		long j = 0;
		for (; j < jt; j += 8) gp2n_ln_dx(xr + j, g + j, gamma + j, d + j, 1, 8, m0, m1, mv, iv, av, bv);
		if (jt < m) gp2n_ln_dx(xr + jt, g + jt, gamma + jt, d + jt, 0, m - jt, m0, m1, mv, iv, av, bv);
	}
}

#pragma GCC pop_options
