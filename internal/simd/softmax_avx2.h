// gp5_softmax_rows and gp5_softmax_bwd (softmax_avx512.h; models/swin's softmaxRows32 and
// softmaxBwd) in AVX2+FMA, for level AVX2: the same float64 operations per element (no
// fused multiply-adds, hence the pragma), and the row sums in the same eight lanes, kept as
// two __m256d (elements 0-3 and 4-7 of each group of eight), reduced in the same order as
// GCC's _mm512_reduce_add_pd, so the results equal the AVX-512 ones bit for bit. Tails use
// masked loads and partial stores (gp2s_stp; vmaskmovps to memory is microcoded on AMD's
// cores, about 20 cycles on Zen 4): no memory past the row is touched.

#include <immintrin.h>
#include "avx2_common.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")

// gp2s_stp stores the first r (0 to 7) floats of (lo, hi) in at most three plain stores.
static inline void gp2s_stp(float *p, __m128 lo, __m128 hi, int r) { gp2v_stp(p, _mm256_set_m128(hi, lo), r); }

// gp2s_stpd stores the first r (0 to 7) doubles of (lo, hi).
static inline void gp2s_stpd(double *p, __m256d lo, __m256d hi, int r) {
	if (r < 4) {
		gp2v_stpd(p, lo, r);
		return;
	}
	_mm256_storeu_pd(p, lo);
	gp2v_stpd(p + 4, hi, r - 4);
}

// gp2s_hmax is _mm512_reduce_max_pd of (lo, hi) in GCC's order (max_pd's operand order
// decides which of +0 and -0 survives).
static inline double gp2s_hmax(__m256d lo, __m256d hi) {
	__m256d t = _mm256_max_pd(hi, lo);
	__m128d u = _mm_max_pd(_mm256_extractf128_pd(t, 1), _mm256_castpd256_pd128(t));
	return _mm_cvtsd_f64(_mm_max_pd(u, _mm_unpackhi_pd(u, u)));
}

// gp2s_sc is one half of softmaxRows32's first pass: v = s + bias (+ mask) in float64,
// rounded to float32 (returned, to be stored over s); *rd is the rounded value widened, and
// its NaN lanes are ored into *nan.
static inline __attribute__((always_inline)) __m128 gp2s_sc(const float *row, const double *br, const float *mr,
                                                           int full, __m128i m, __m256d *rd, __m256d *nan) {
	__m256d v = _mm256_add_pd(gp2v_ld4(row, full, m), gp2v_ldd(br, full, m));
	if (mr) v = _mm256_add_pd(v, gp2v_ld4(mr, full, m));
	__m128 r = _mm256_cvtpd_ps(v);
	*rd = _mm256_cvtps_pd(r);
	*nan = _mm256_or_pd(*nan, _mm256_cmp_pd(*rd, *rd, _CMP_UNORD_Q));
	return r;
}

// gp2s_exp is the exponential of gp5_softmax_rows for x = s - max: the same range
// reduction and polynomial, and 0 at the cut-off (x <= -700). _mm512_scalef_pd(p, k) is
// p·2^k with 2^k built from its exponent bits: k is in [-1010, 0] there (x in [-700, 0]), so
// 2^k is normal and the product exact, as scalef's. A NaN x gives NaN (p is NaN).
static inline __m256d gp2s_exp(__m256d x) {
	const __m256d log2e = _mm256_set1_pd(1.4426950408889634), ln2hi = _mm256_set1_pd(6.93147180369123816490e-01),
	              ln2lo = _mm256_set1_pd(1.90821492927058770002e-10), lo = _mm256_set1_pd(-700), one = _mm256_set1_pd(1);
	// Go's max keeps NaN, and so does max_pd(lo, x): it returns its second operand when
	// either is NaN (one instruction for the AVX-512's compare, max and blend).
	x = _mm256_max_pd(lo, x);
	__m256d k = _mm256_round_pd(_mm256_mul_pd(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256d r = _mm256_sub_pd(_mm256_sub_pd(x, _mm256_mul_pd(k, ln2hi)), _mm256_mul_pd(k, ln2lo));
	__m256d r2 = _mm256_mul_pd(r, r), r4 = _mm256_mul_pd(r2, r2);
	__m256d p1 = _mm256_add_pd(_mm256_add_pd(one, r),
	                           _mm256_mul_pd(r2, _mm256_add_pd(_mm256_set1_pd(1.0 / 2), _mm256_mul_pd(r, _mm256_set1_pd(1.0 / 6)))));
	__m256d q0 = _mm256_add_pd(_mm256_set1_pd(1.0 / 24), _mm256_mul_pd(r, _mm256_set1_pd(1.0 / 120)));
	__m256d q1 = _mm256_mul_pd(r2, _mm256_add_pd(_mm256_set1_pd(1.0 / 720), _mm256_mul_pd(r, _mm256_set1_pd(1.0 / 5040))));
	__m256d q = _mm256_add_pd(_mm256_add_pd(q0, q1), _mm256_mul_pd(r4, _mm256_set1_pd(1.0 / 40320)));
	__m256d p = _mm256_add_pd(p1, _mm256_mul_pd(r4, q));
	// k + 1023 + 1.5·2^52 (exact: k is an integer) holds k + 1023 in its low mantissa bits;
	// shifted into the exponent field (bits 52-62, the rest shifted out) they are 2^k.
	__m256d pk = _mm256_castsi256_pd(
	    _mm256_slli_epi64(_mm256_castpd_si256(_mm256_add_pd(k, _mm256_set1_pd(6755399441055744.0 + 1023))), 52));
	__m256d e = _mm256_mul_pd(p, pk);
	return _mm256_andnot_pd(_mm256_cmp_pd(x, lo, _CMP_EQ_OQ), e);
}

// gp2s_ex4 is one half of the exponential pass: e = exp(s - max), masked lanes 0, added
// into *sum and returned as float32.
static inline __attribute__((always_inline)) __m128 gp2s_ex4(const float *row, int full, __m128i m, __m256d mv,
                                                            __m256d *sum) {
	__m256d e = gp2s_exp(_mm256_sub_pd(gp2v_ld4(row, full, m), mv));
	if (!full) e = _mm256_and_pd(e, _mm256_castsi256_pd(gp2v_w(m)));
	*sum = _mm256_add_pd(*sum, e);
	return _mm256_cvtpd_ps(e);
}

// gp2s_sc4 is one half of the last pass: s·inv as float32.
static inline __attribute__((always_inline)) __m128 gp2s_sc4(const float *row, int full, __m128i m, __m256d inv) {
	return _mm256_cvtpd_ps(_mm256_mul_pd(gp2v_ld4(row, full, m), inv));
}

// gp2s_tail is a row's tail: elements jt..jt+rt-1 (rt < 8), with their masks for the two
// halves and those masks widened to 64-bit lanes.
typedef struct {
	int jt, rt;
	__m128i m0, m1;
	__m256d w0, w1;
} gp2s_tail;

static inline gp2s_tail gp2s_mktail(int n) {
	gp2s_tail t;
	t.jt = n & ~7;
	t.rt = n - t.jt;
	t.m0 = gp2v_m4(t.rt);
	t.m1 = gp2v_m4(t.rt - 4);
	t.w0 = _mm256_castsi256_pd(gp2v_w(t.m0));
	t.w1 = _mm256_castsi256_pd(gp2v_w(t.m1));
	return t;
}

// gp2s_max_pass is gp5_softmax_rows's first loop for one row: s = float32(s + bias (+ mask))
// stored, and the row's max returned (NaN when the row has a NaN).
static inline __attribute__((always_inline)) double gp2s_max_pass(float *row, const double *br, const float *mr,
                                                                 const gp2s_tail *t) {
	__m256d mx0 = _mm256_set1_pd(-__builtin_inf()), mx1 = mx0, nan = _mm256_setzero_pd(), r0, r1;
	int j = 0;
	for (; j < t->jt; j += 8) {
		__m128 f0 = gp2s_sc(row + j, br + j, mr ? mr + j : 0, 1, t->m0, &r0, &nan);
		__m128 f1 = gp2s_sc(row + j + 4, br + j + 4, mr ? mr + j + 4 : 0, 1, t->m1, &r1, &nan);
		_mm_storeu_ps(row + j, f0);
		_mm_storeu_ps(row + j + 4, f1);
		mx0 = _mm256_max_pd(mx0, r0);
		mx1 = _mm256_max_pd(mx1, r1);
	}
	if (t->rt) {
		__m128 f0 = gp2s_sc(row + j, br + j, mr ? mr + j : 0, 0, t->m0, &r0, &nan);
		__m128 f1 = gp2s_sc(row + j + 4, br + j + 4, mr ? mr + j + 4 : 0, 0, t->m1, &r1, &nan);
		gp2s_stp(row + j, f0, f1, t->rt);
		// The lanes past the row keep the running max, as _mm512_mask_max_pd does.
		mx0 = _mm256_blendv_pd(mx0, _mm256_max_pd(mx0, r0), t->w0);
		mx1 = _mm256_blendv_pd(mx1, _mm256_max_pd(mx1, r1), t->w1);
	}
	return _mm256_movemask_pd(nan) ? __builtin_nan("") : gp2s_hmax(mx0, mx1);
}

// gp2s_exp_pass is the second loop: s = exp(s - max) stored (as float32), their sum (in
// float64, eight lanes) returned.
static inline __attribute__((always_inline)) double gp2s_exp_pass(float *row, double mx, const gp2s_tail *t) {
	__m256d mv = _mm256_set1_pd(mx), sum0 = _mm256_setzero_pd(), sum1 = sum0;
	int j = 0;
	for (; j < t->jt; j += 8) {
		__m128 e0 = gp2s_ex4(row + j, 1, t->m0, mv, &sum0), e1 = gp2s_ex4(row + j + 4, 1, t->m1, mv, &sum1);
		_mm_storeu_ps(row + j, e0);
		_mm_storeu_ps(row + j + 4, e1);
	}
	if (t->rt) {
		__m128 e0 = gp2s_ex4(row + j, 0, t->m0, mv, &sum0), e1 = gp2s_ex4(row + j + 4, 0, t->m1, mv, &sum1);
		gp2s_stp(row + j, e0, e1, t->rt);
	}
	return gp2v_hsum(sum0, sum1);
}

// gp2s_div_pass is the last loop: s = s·(1/sum).
static inline __attribute__((always_inline)) void gp2s_div_pass(float *row, double sum, const gp2s_tail *t) {
	__m256d inv = _mm256_set1_pd(1 / sum);
	int j = 0;
	for (; j < t->jt; j += 8) {
		__m128 v0 = gp2s_sc4(row + j, 1, t->m0, inv), v1 = gp2s_sc4(row + j + 4, 1, t->m1, inv);
		_mm_storeu_ps(row + j, v0);
		_mm_storeu_ps(row + j + 4, v1);
	}
	if (t->rt) gp2s_stp(row + j, gp2s_sc4(row + j, 0, t->m0, inv), gp2s_sc4(row + j + 4, 0, t->m1, inv), t->rt);
}

// gp2_softmax_rows is gp5_softmax_rows (softmaxRows32): each row of the n×n scores s gets
// bias (and mask, or none) added, rounded to float32, then its softmax in float64. A NaN in a
// row makes the whole row NaN. Rows go in pairs, pass by pass: a row's passes depend on each
// other through its max and its sum (a horizontal reduction and a division each), and a
// 49-element row is too short for the CPU to overlap that wait with anything but the other
// row's work.
static void gp2_softmax_rows(float *s, const double *bias, const float *mask, int n) {
	gp2s_tail t = gp2s_mktail(n);
	long ln = n;
	int i = 0;
	for (; i + 2 <= n; i += 2) {
		float *ra = s + i * ln, *rb = ra + ln;
		const double *ba = bias + i * ln, *bb = ba + ln;
		const float *ma = mask ? mask + i * ln : 0, *mb = mask ? ma + ln : 0;
		double xa = gp2s_max_pass(ra, ba, ma, &t), xb = gp2s_max_pass(rb, bb, mb, &t);
		double sa = gp2s_exp_pass(ra, xa, &t), sb = gp2s_exp_pass(rb, xb, &t);
		gp2s_div_pass(ra, sa, &t);
		gp2s_div_pass(rb, sb, &t);
	}
	if (i < n) {
		float *ra = s + i * ln;
		gp2s_div_pass(ra, gp2s_exp_pass(ra, gp2s_max_pass(ra, bias + i * ln, mask ? mask + i * ln : 0, &t), &t), &t);
	}
}

// gp2s_bwd4 is one half of the gradient pass: g = p·(d - dot).
static inline __attribute__((always_inline)) __m256d gp2s_bwd4(const float *p, const float *d, int full, __m128i m,
                                                              __m256d dot) {
	return _mm256_mul_pd(gp2v_ld4(p, full, m), _mm256_sub_pd(gp2v_ld4(d, full, m), dot));
}

// gp2s_dot_pass is gp5_softmax_bwd's first loop for one row: Σ_k P[k]·dP[k] (products
// then sums in eight lanes, as the AVX-512 loop).
static inline __attribute__((always_inline)) double gp2s_dot_pass(const float *pi, const float *di, const gp2s_tail *t) {
	__m256d s0 = _mm256_setzero_pd(), s1 = s0;
	int j = 0;
	for (; j < t->jt; j += 8) {
		s0 = _mm256_add_pd(s0, _mm256_mul_pd(gp2v_ld4(pi + j, 1, t->m0), gp2v_ld4(di + j, 1, t->m0)));
		s1 = _mm256_add_pd(s1, _mm256_mul_pd(gp2v_ld4(pi + j + 4, 1, t->m1), gp2v_ld4(di + j + 4, 1, t->m1)));
	}
	if (t->rt) {
		s0 = _mm256_add_pd(s0, _mm256_mul_pd(gp2v_ld4(pi + j, 0, t->m0), gp2v_ld4(di + j, 0, t->m0)));
		s1 = _mm256_add_pd(s1, _mm256_mul_pd(gp2v_ld4(pi + j + 4, 0, t->m1), gp2v_ld4(di + j + 4, 0, t->m1)));
	}
	return gp2v_hsum(s0, s1);
}

// gp2s_grad_pass is the second loop: dS = P·(dP - dot) over dP as float32, added into acc.
static inline __attribute__((always_inline)) void gp2s_grad_pass(const float *pi, float *di, double *ai, double dot,
                                                                const gp2s_tail *t) {
	__m256d dv = _mm256_set1_pd(dot);
	int j = 0;
	for (; j < t->jt; j += 8) {
		__m256d g0 = gp2s_bwd4(pi + j, di + j, 1, t->m0, dv), g1 = gp2s_bwd4(pi + j + 4, di + j + 4, 1, t->m1, dv);
		_mm_storeu_ps(di + j, _mm256_cvtpd_ps(g0));
		_mm_storeu_ps(di + j + 4, _mm256_cvtpd_ps(g1));
		_mm256_storeu_pd(ai + j, _mm256_add_pd(_mm256_loadu_pd(ai + j), g0));
		_mm256_storeu_pd(ai + j + 4, _mm256_add_pd(_mm256_loadu_pd(ai + j + 4), g1));
	}
	if (t->rt) {
		__m256d g0 = gp2s_bwd4(pi + j, di + j, 0, t->m0, dv), g1 = gp2s_bwd4(pi + j + 4, di + j + 4, 0, t->m1, dv);
		gp2s_stp(di + j, _mm256_cvtpd_ps(g0), _mm256_cvtpd_ps(g1), t->rt);
		gp2s_stpd(ai + j, _mm256_add_pd(gp2v_ldd(ai + j, 0, t->m0), g0), _mm256_add_pd(gp2v_ldd(ai + j + 4, 0, t->m1), g1),
		          t->rt);
	}
}

// gp2_softmax_bwd is gp5_softmax_bwd (attnBackward's softmaxBwd) for one window and head:
// dS[i,j] = P[i,j]·(dP[i,j] - Σ_k P[i,k]·dP[i,k]) in float64, written over dP (d) as
// float32 and added into acc (float64, n×n). Rows in pairs, as gp2_softmax_rows.
static void gp2_softmax_bwd(const float *p, float *d, double *acc, int n) {
	gp2s_tail t = gp2s_mktail(n);
	long ln = n;
	int i = 0;
	for (; i + 2 <= n; i += 2) {
		const float *pa = p + i * ln, *pb = pa + ln;
		float *da = d + i * ln, *db = da + ln;
		double *aa = acc + i * ln, *ab = aa + ln;
		double xa = gp2s_dot_pass(pa, da, &t), xb = gp2s_dot_pass(pb, db, &t);
		gp2s_grad_pass(pa, da, aa, xa, &t);
		gp2s_grad_pass(pb, db, ab, xb, &t);
	}
	if (i < n) gp2s_grad_pass(p + i * ln, d + i * ln, acc + i * ln, gp2s_dot_pass(p + i * ln, d + i * ln, &t), &t);
}

#pragma GCC pop_options
