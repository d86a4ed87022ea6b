// softmaxRows32 (softmax.go) in AVX-512, eight lanes of float64 at a time with the same
// operations in the same order per element (no fused multiply-adds, hence the pragma), so
// that only the row sum's order differs from the Go loop.

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,fma")
#pragma GCC optimize("fp-contract=off")

static inline __mmask8 gp5_sx_mask(int n) { return n >= 8 ? 0xff : (__mmask8)((1u << n) - 1); }

// gp5_sx_exp is exp(x) per lane of x ≤ 0 as softmaxRows32's expRow computes it, 0 at its
// -700 cut-off and in the lanes outside m. max(lo, x) is x when x is NaN (the second
// operand), as Go's max keeps NaN; NEQ_UQ keeps NaN lanes.
static inline __attribute__((always_inline)) __m512d gp5_sx_exp(__m512d x, __mmask8 m) {
	const __m512d log2e = _mm512_set1_pd(1.4426950408889634), ln2hi = _mm512_set1_pd(6.93147180369123816490e-01),
	              ln2lo = _mm512_set1_pd(1.90821492927058770002e-10), lo = _mm512_set1_pd(-700), one = _mm512_set1_pd(1);
	x = _mm512_max_pd(lo, x);
	__m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512d r = _mm512_sub_pd(_mm512_sub_pd(x, _mm512_mul_pd(k, ln2hi)), _mm512_mul_pd(k, ln2lo));
	__m512d r2 = _mm512_mul_pd(r, r), r4 = _mm512_mul_pd(r2, r2);
	__m512d p1 = _mm512_add_pd(_mm512_add_pd(one, r),
	                           _mm512_mul_pd(r2, _mm512_add_pd(_mm512_set1_pd(1.0 / 2), _mm512_mul_pd(r, _mm512_set1_pd(1.0 / 6)))));
	__m512d q0 = _mm512_add_pd(_mm512_set1_pd(1.0 / 24), _mm512_mul_pd(r, _mm512_set1_pd(1.0 / 120)));
	__m512d q1 = _mm512_mul_pd(r2, _mm512_add_pd(_mm512_set1_pd(1.0 / 720), _mm512_mul_pd(r, _mm512_set1_pd(1.0 / 5040))));
	__m512d q = _mm512_add_pd(_mm512_add_pd(q0, q1), _mm512_mul_pd(r4, _mm512_set1_pd(1.0 / 40320)));
	__m512d p = _mm512_add_pd(p1, _mm512_mul_pd(r4, q));
	return _mm512_maskz_scalef_pd(_mm512_mask_cmp_pd_mask(m, x, lo, _CMP_NEQ_UQ), p, k);
}

// gp5_sx_load is a row's eight scores from j (lanes in m): s + bias (+ mask) in double,
// rounded to float32, widened back; nan and mx gather the row's NaN lanes and maximum.
static inline __attribute__((always_inline)) __m512d gp5_sx_load(const float *s, const double *bias, const float *mask,
                                                                long o, __mmask8 m, __mmask8 *nan, __m512d *mx) {
	__m512d v = _mm512_add_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, s + o)), _mm512_maskz_loadu_pd(m, bias + o));
	if (mask) v = _mm512_add_pd(v, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, mask + o)));
	__m512d rd = _mm512_cvtps_pd(_mm512_cvtpd_ps(v));
	*nan |= _mm512_mask_cmp_pd_mask(m, rd, rd, _CMP_UNORD_Q);
	*mx = _mm512_mask_max_pd(*mx, m, *mx, rd);
	return rd;
}

// gp5_sx_rows is the softmax of the R rows from i0 (R at most 4) of n ≤ 64 elements, in
// step, each row's values held in registers between the passes: the same operations per
// element and the same order of each row's sum as one row at a time, without storing the
// rounded scores and reading them back between passes.
static inline __attribute__((always_inline)) void gp5_sx_rows(int R, float *s, const double *bias, const float *mask,
                                                             int n, int i0) {
	int nv = (n + 7) / 8;
	__m512d v[4][8], mx[4], mv[4], sum[4], inv[4];
	__m256 e32[4][8];
	__mmask8 nan[4];
	for (int i = 0; i < R; i++) {
		mx[i] = _mm512_set1_pd(-__builtin_inf());
		nan[i] = 0;
	}
	for (int t = 0; t < nv; t++)
		for (int i = 0; i < R; i++)
			v[i][t] = gp5_sx_load(s, bias, mask, (long)(i0 + i) * n + 8 * t, gp5_sx_mask(n - 8 * t), &nan[i], &mx[i]);
	for (int i = 0; i < R; i++) {
		mv[i] = _mm512_set1_pd(nan[i] ? __builtin_nan("") : _mm512_reduce_max_pd(mx[i]));
		sum[i] = _mm512_setzero_pd();
	}
	for (int t = 0; t < nv; t++)
		for (int i = 0; i < R; i++) {
			__m512d e = gp5_sx_exp(_mm512_sub_pd(v[i][t], mv[i]), gp5_sx_mask(n - 8 * t));
			e32[i][t] = _mm512_cvtpd_ps(e);
			sum[i] = _mm512_add_pd(sum[i], e);
		}
	for (int i = 0; i < R; i++) inv[i] = _mm512_set1_pd(1 / _mm512_reduce_add_pd(sum[i]));
	for (int t = 0; t < nv; t++)
		for (int i = 0; i < R; i++)
			_mm256_mask_storeu_ps(s + (long)(i0 + i) * n + 8 * t, gp5_sx_mask(n - 8 * t),
			                      _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(e32[i][t]), inv[i])));
}

static void gp5_softmax_rows(float *s, const double *bias, const float *mask, int n) {
	if (n <= 64) {
		int i = 0;
		for (; i + 4 <= n; i += 4) gp5_sx_rows(4, s, bias, mask, n, i);
		for (; i < n; i++) gp5_sx_rows(1, s, bias, mask, n, i);
		return;
	}
	// Longer rows: one at a time, the rounded scores stored and read back.
	for (int i = 0; i < n; i++) {
		float *row = s + (long)i * n;
		__m512d mx = _mm512_set1_pd(-__builtin_inf());
		__mmask8 nan = 0;
		for (int j = 0; j < n; j += 8) {
			__mmask8 m = gp5_sx_mask(n - j);
			_mm256_mask_storeu_ps(row + j, m, _mm512_cvtpd_ps(gp5_sx_load(s, bias, mask, (long)i * n + j, m, &nan, &mx)));
		}
		__m512d mv = _mm512_set1_pd(nan ? __builtin_nan("") : _mm512_reduce_max_pd(mx)), sum = _mm512_setzero_pd();
		for (int j = 0; j < n; j += 8) {
			__mmask8 m = gp5_sx_mask(n - j);
			__m512d e = gp5_sx_exp(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, row + j)), mv), m);
			_mm256_mask_storeu_ps(row + j, m, _mm512_cvtpd_ps(e));
			sum = _mm512_add_pd(sum, e);
		}
		__m512d inv = _mm512_set1_pd(1 / _mm512_reduce_add_pd(sum));
		for (int j = 0; j < n; j += 8) {
			__mmask8 m = gp5_sx_mask(n - j);
			__m512d v = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, row + j)), inv);
			_mm256_mask_storeu_ps(row + j, m, _mm512_cvtpd_ps(v));
		}
	}
}

// gp5_sb_rows is gp5_softmax_bwd for the R rows from i0 (R at most 4) in step: each row's
// dot product is its own chain in the one-row order, so the bits do not depend on R, and R
// chains hide each other's latency.
static inline __attribute__((always_inline)) void gp5_sb_rows(int R, const float *p, float *d, double *acc, int n,
                                                             int i0) {
	__m512d s[4], dot[4];
	for (int i = 0; i < R; i++) s[i] = _mm512_setzero_pd();
	for (int j = 0; j < n; j += 8) {
		__mmask8 m = gp5_sx_mask(n - j);
		for (int i = 0; i < R; i++) {
			long o = (long)(i0 + i) * n + j;
			s[i] = _mm512_add_pd(s[i], _mm512_mul_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p + o)),
			                                         _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, d + o))));
		}
	}
	for (int i = 0; i < R; i++) dot[i] = _mm512_set1_pd(_mm512_reduce_add_pd(s[i]));
	for (int j = 0; j < n; j += 8) {
		__mmask8 m = gp5_sx_mask(n - j);
		for (int i = 0; i < R; i++) {
			long o = (long)(i0 + i) * n + j;
			__m512d g = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p + o)),
			                          _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, d + o)), dot[i]));
			_mm256_mask_storeu_ps(d + o, m, _mm512_cvtpd_ps(g));
			_mm512_mask_storeu_pd(acc + o, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, acc + o), g));
		}
	}
}

// gp5_softmax_bwd is attnBackward's softmax gradient for one window and head: with P the
// probabilities and dP their gradient (n×n each), dS[i,j] = P[i,j]·(dP[i,j] - Σ_k P[i,k]
// dP[i,k]) in float64, written over dP as float32 and added into acc (float64, n×n).
static void gp5_softmax_bwd(const float *p, float *d, double *acc, int n) {
	int i = 0;
	for (; i + 4 <= n; i += 4) gp5_sb_rows(4, p, d, acc, n, i);
	for (; i < n; i++) gp5_sb_rows(1, p, d, acc, n, i);
}

#pragma GCC pop_options
