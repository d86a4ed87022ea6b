// softmaxRows32 (softmax.go) in AVX-512, eight lanes of float64 at a time with the same
// operations in the same order per element (no fused multiply-adds, hence the pragma), so
// that only the row sum's order differs from the Go loop.

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,fma")
#pragma GCC optimize("fp-contract=off")

static inline __mmask8 gp5_sx_mask(int n) { return n >= 8 ? 0xff : (__mmask8)((1u << n) - 1); }

static void gp5_softmax_rows(float *s, const double *bias, const float *mask, int n) {
	const __m512d log2e = _mm512_set1_pd(1.4426950408889634), ln2hi = _mm512_set1_pd(6.93147180369123816490e-01),
	              ln2lo = _mm512_set1_pd(1.90821492927058770002e-10), lo = _mm512_set1_pd(-700), one = _mm512_set1_pd(1);
	for (int i = 0; i < n; i++) {
		float *row = s + (long)i * n;
		const double *br = bias + (long)i * n;
		const float *mr = mask ? mask + (long)i * n : 0;
		__m512d mx = _mm512_set1_pd(-__builtin_inf());
		__mmask8 nan = 0;
		for (int j = 0; j < n; j += 8) {
			__mmask8 m = gp5_sx_mask(n - j);
			__m512d v = _mm512_add_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, row + j)), _mm512_maskz_loadu_pd(m, br + j));
			if (mr) v = _mm512_add_pd(v, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, mr + j)));
			__m256 r = _mm512_cvtpd_ps(v);
			_mm256_mask_storeu_ps(row + j, m, r);
			__m512d rd = _mm512_cvtps_pd(r);
			nan |= _mm512_mask_cmp_pd_mask(m, rd, rd, _CMP_UNORD_Q);
			mx = _mm512_mask_max_pd(mx, m, mx, rd);
		}
		double mxs = nan ? __builtin_nan("") : _mm512_reduce_max_pd(mx);
		__m512d mv = _mm512_set1_pd(mxs), sum = _mm512_setzero_pd();
		for (int j = 0; j < n; j += 8) {
			__mmask8 m = gp5_sx_mask(n - j);
			__m512d x = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, row + j)), mv);
			__mmask8 nanx = _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
			x = _mm512_mask_blend_pd(nanx, _mm512_max_pd(x, lo), x); // Go's max keeps NaN
			__m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			__m512d r = _mm512_sub_pd(_mm512_sub_pd(x, _mm512_mul_pd(k, ln2hi)), _mm512_mul_pd(k, ln2lo));
			__m512d r2 = _mm512_mul_pd(r, r), r4 = _mm512_mul_pd(r2, r2);
			__m512d p1 = _mm512_add_pd(_mm512_add_pd(one, r),
			                           _mm512_mul_pd(r2, _mm512_add_pd(_mm512_set1_pd(1.0 / 2), _mm512_mul_pd(r, _mm512_set1_pd(1.0 / 6)))));
			__m512d q0 = _mm512_add_pd(_mm512_set1_pd(1.0 / 24), _mm512_mul_pd(r, _mm512_set1_pd(1.0 / 120)));
			__m512d q1 = _mm512_mul_pd(r2, _mm512_add_pd(_mm512_set1_pd(1.0 / 720), _mm512_mul_pd(r, _mm512_set1_pd(1.0 / 5040))));
			__m512d q = _mm512_add_pd(_mm512_add_pd(q0, q1), _mm512_mul_pd(r4, _mm512_set1_pd(1.0 / 40320)));
			__m512d p = _mm512_add_pd(p1, _mm512_mul_pd(r4, q));
			__m512d e = _mm512_scalef_pd(p, k);
			e = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, lo, _CMP_EQ_OQ), e, _mm512_setzero_pd());
			e = _mm512_maskz_mov_pd(m, e);
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

// gp5_softmax_bwd is attnBackward's softmax gradient for one window and head: with P the
// probabilities and dP their gradient (n×n each), dS[i,j] = P[i,j]·(dP[i,j] - Σ_k P[i,k]
// dP[i,k]) in float64, written over dP as float32 and added into acc (float64, n×n).
static void gp5_softmax_bwd(const float *p, float *d, double *acc, int n) {
	for (int i = 0; i < n; i++) {
		const float *pi = p + (long)i * n;
		float *di = d + (long)i * n;
		double *ai = acc + (long)i * n;
		__m512d s = _mm512_setzero_pd();
		for (int j = 0; j < n; j += 8) {
			__mmask8 m = gp5_sx_mask(n - j);
			s = _mm512_add_pd(s, _mm512_mul_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, pi + j)),
			                                   _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, di + j))));
		}
		__m512d dot = _mm512_set1_pd(_mm512_reduce_add_pd(s));
		for (int j = 0; j < n; j += 8) {
			__mmask8 m = gp5_sx_mask(n - j);
			__m512d g = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, pi + j)),
			                          _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, di + j)), dot));
			_mm256_mask_storeu_ps(di + j, m, _mm512_cvtpd_ps(g));
			_mm512_mask_storeu_pd(ai + j, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, ai + j), g));
		}
	}
}

#pragma GCC pop_options
