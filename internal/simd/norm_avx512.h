// AVX-512 kernels of the normalisations (norm_kernels.go, norm_layer.go) and ReLU
// (act_unary.go) of nn/ops, for conv_cgo.go; each mirrors the Go function named in its comment.
// Reductions accumulate in double in eight lanes (a fixed order, independent of threads);
// the elementwise float32 formulas round like Go's (no fused multiply-adds).

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#pragma GCC optimize("fp-contract=off")

static inline __mmask8 gp5_mask8(long n) { return n >= 8 ? 0xff : (__mmask8)((1u << n) - 1); }

// gp5_ld8 widens the lanes of m of p to doubles, the others 0. A full mask takes a plain load
// (Note [Masked loads from memory] in avx512_common.h).
static inline __m512d gp5_ld8(const float *p, __mmask8 m) {
	return _mm512_cvtps_pd(gp5_ldm8(m, p));
}

// gp5_sum_sq is sumSq: *s = Σ x, *q = Σ x².
static inline void gp5_sum_sq(const float *x, long n, double *s, double *q) {
	__m512d s0 = _mm512_setzero_pd(), q0 = _mm512_setzero_pd();
	for (long i = 0; i < n; i += 8) {
		__m512d v = gp5_ld8(x + i, gp5_mask8(n - i));
		s0 = _mm512_add_pd(s0, v);
		q0 = _mm512_fmadd_pd(v, v, q0);
	}
	*s = _mm512_reduce_add_pd(s0);
	*q = _mm512_reduce_add_pd(q0);
}

// gp5_sum_dot is sumDot: *s = Σ d, *sx = Σ d·x; with sel (not NULL), d is read as +0 where
// sel's bits are not positive as an int32 (reluBits32's mask, which gives the same +0).
static inline __attribute__((always_inline)) void gp5_sum_dot(const float *d, const float *x, const float *sel,
                                                             long n, double *s, double *sx) {
	__m512d s0 = _mm512_setzero_pd(), p0 = _mm512_setzero_pd();
	for (long i = 0; i < n; i += 8) {
		__mmask8 m = gp5_mask8(n - i), k = m;
		if (sel) k = _mm256_mask_cmpgt_epi32_mask(m, gp5_ldm8i(m, sel + i), _mm256_setzero_si256());
		__m512d g = _mm512_maskz_mov_pd(k, gp5_ld8(d + i, m));
		s0 = _mm512_add_pd(s0, g);
		p0 = _mm512_fmadd_pd(g, gp5_ld8(x + i, m), p0);
	}
	*s = _mm512_reduce_add_pd(s0);
	*sx = _mm512_reduce_add_pd(p0);
}

// gp5_bn_sums is bnSums for channels [lo, hi) of x [n, c, hw]: image by image, the
// channels' planes in memory order (Note [Channel sums in memory order] in nn/ops).
static void gp5_bn_sums(const float *x, long n, long c, long hw, long lo, long hi, double *sum, double *sq) {
	for (long ch = lo; ch < hi; ch++) sum[ch] = sq[ch] = 0;
	for (long i = 0; i < n; i++) {
		for (long ch = lo; ch < hi; ch++) {
			double s, q;
			gp5_sum_sq(x + (i * c + ch) * hw, hw, &s, &q);
			sum[ch] += s;
			sq[ch] += q;
		}
	}
}

// gp5n_bn_grad_sums is gp5_bn_grad_sums's body, sel NULL or not (inlined as each).
static inline __attribute__((always_inline)) void gp5n_bn_grad_sums(const float *x, const float *dy, const float *sel,
                                                                   long n, long c, long hw, long lo, long hi,
                                                                   const double *mean, double *sdy, double *sdyx) {
	for (long ch = lo; ch < hi; ch++) sdy[ch] = sdyx[ch] = 0;
	for (long i = 0; i < n; i++) {
		for (long ch = lo; ch < hi; ch++) {
			long off = (i * c + ch) * hw;
			double s, sx;
			gp5_sum_dot(dy + off, x + off, sel ? sel + off : 0, hw, &s, &sx);
			sdy[ch] += s;
			sdyx[ch] += sx - mean[ch] * s;
		}
	}
}

// gp5_bn_grad_sums is bnGradSums for channels [lo, hi), image by image as gp5_bn_sums; with
// sel (not NULL), dy is masked by ReLU's selector as it is read.
static void gp5_bn_grad_sums(const float *x, const float *dy, const float *sel, long n, long c, long hw, long lo,
                             long hi, const double *mean, double *sdy, double *sdyx) {
	if (sel)
		gp5n_bn_grad_sums(x, dy, sel, n, c, hw, lo, hi, mean, sdy, sdyx);
	else
		gp5n_bn_grad_sums(x, dy, 0, n, c, hw, lo, hi, mean, sdy, sdyx);
}

// gp5_relu_row is reluBits32 with sel = y: keep y where its bits are positive as an int32.
static inline void gp5_relu_sel(const float *v, float *y, const float *sel, long n) {
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp5_mask16(n - i);
		__m512i s = gp5_ldmi(m, sel + i);
		__mmask16 keep = _mm512_cmpgt_epi32_mask(s, _mm512_setzero_si512());
		_mm512_mask_storeu_ps(y + i, m, _mm512_maskz_mov_ps(keep, gp5_ldm(m, v + i)));
	}
}

// gp5_scale is applyMask's kept run: y = x·s (one rounding, as the Go loop).
static void gp5_scale(const float *x, float *y, long n, float s) {
	__m512 sv = _mm512_set1_ps(s);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp5_mask16(n - i);
		_mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(gp5_ldm(m, x + i), sv));
	}
}

// gp5_bn_apply is bnApply for rows [lo, hi) (row r is channel r % c): y = x·sa + sb, then
// ReLU when relu.
static void gp5_bn_apply(const float *x, float *y, long c, long hw, long lo, long hi, const double *mean,
                        const double *istd, const double *gamma, const double *beta, int relu) {
	for (long r = lo; r < hi; r++) {
		long ch = r % c;
		double a = gamma[ch] * istd[ch];
		__m512 sa = _mm512_set1_ps((float)a), sb = _mm512_set1_ps((float)(beta[ch] - mean[ch] * a));
		const float *row = x + r * hw;
		float *out = y + r * hw;
		for (long j = 0; j < hw; j += 16) {
			__mmask16 m = gp5_mask16(hw - j);
			__m512 v = _mm512_add_ps(_mm512_mul_ps(gp5_ldm(m, row + j), sa), sb);
			if (relu) v = _mm512_maskz_mov_ps(_mm512_cmpgt_epi32_mask(_mm512_castps_si512(v), _mm512_setzero_si512()), v);
			_mm512_mask_storeu_ps(out + j, m, v);
		}
	}
}

// gp5n_bn_grad_apply is gp5_bn_grad_apply's body, sel NULL or not (inlined as each).
static inline __attribute__((always_inline)) void gp5n_bn_grad_apply(const float *x, const float *dy, const float *sel,
                                                                    float *dx, long c, long hw, long lo, long hi,
                                                                    const double *k1, const double *k2,
                                                                    const double *k3) {
	for (long r = lo; r < hi; r++) {
		long ch = r % c, off = r * hw;
		float af = (float)k1[ch], bf = (float)k2[ch], df = (float)k3[ch];
		__m512 a = _mm512_set1_ps(af), b = _mm512_set1_ps(bf), d = _mm512_set1_ps(df);
		int only = bf == 0 && df == 0;
		for (long j = 0; j < hw; j += 16) {
			__mmask16 m = gp5_mask16(hw - j), k = m;
			if (sel) k = _mm512_mask_cmpgt_epi32_mask(m, gp5_ldmi(m, sel + off + j), _mm512_setzero_si512());
			__m512 v = _mm512_mul_ps(a, _mm512_maskz_mov_ps(k, gp5_ldm(m, dy + off + j)));
			if (!only) v = _mm512_add_ps(_mm512_add_ps(v, _mm512_mul_ps(b, gp5_ldm(m, x + off + j))), d);
			_mm512_mask_storeu_ps(dx + off + j, m, v);
		}
	}
}

// gp5_bn_grad_apply is bnGradApply for rows [lo, hi): dx = k1·dy + k2·x + k3; with sel (not
// NULL), dy is masked by ReLU's selector as it is read.
static void gp5_bn_grad_apply(const float *x, const float *dy, const float *sel, float *dx, long c, long hw, long lo,
                              long hi, const double *k1, const double *k2, const double *k3) {
	if (sel)
		gp5n_bn_grad_apply(x, dy, sel, dx, c, hw, lo, hi, k1, k2, k3);
	else
		gp5n_bn_grad_apply(x, dy, 0, dx, c, hw, lo, hi, k1, k2, k3);
}

// gp5_ln_fwd_rows is lnForward's loop for the R rows from r0 (R at most 4), in step: each
// row's sums are their own chains of adds in the order of the one-row loop, so the bits do
// not depend on R, and R chains hide each other's latency.
static inline __attribute__((always_inline)) void gp5_ln_fwd_rows(int R, const float *x, float *y, long r0, long m,
                                                                 const double *gamma, const double *beta, double eps,
                                                                 double *mean, double *istd) {
	__m512d s[4], q[4], mv[4], iv[4];
	for (int i = 0; i < R; i++) s[i] = _mm512_setzero_pd();
	for (long j = 0; j < m; j += 8) {
		__mmask8 k = gp5_mask8(m - j);
		for (int i = 0; i < R; i++) s[i] = _mm512_add_pd(s[i], gp5_ld8(x + (r0 + i) * m + j, k));
	}
	for (int i = 0; i < R; i++) {
		mv[i] = _mm512_set1_pd(_mm512_reduce_add_pd(s[i]) / (double)m);
		q[i] = _mm512_setzero_pd();
	}
	for (long j = 0; j < m; j += 8) {
		__mmask8 k = gp5_mask8(m - j);
		for (int i = 0; i < R; i++) {
			__m512d d = _mm512_maskz_sub_pd(k, gp5_ld8(x + (r0 + i) * m + j, k), mv[i]);
			q[i] = _mm512_fmadd_pd(d, d, q[i]);
		}
	}
	for (int i = 0; i < R; i++) {
		double var = _mm512_reduce_add_pd(q[i]) / (double)m + eps;
		double is = 1 / _mm_cvtsd_f64(_mm_sqrt_sd(_mm_set_sd(var), _mm_set_sd(var)));
		mean[r0 + i] = _mm512_cvtsd_f64(mv[i]);
		istd[r0 + i] = is;
		iv[i] = _mm512_set1_pd(is);
	}
	for (long j = 0; j < m; j += 8) {
		__mmask8 k = gp5_mask8(m - j);
		__m512d g = gp5_ldmd(k, gamma + j), b = gp5_ldmd(k, beta + j);
		for (int i = 0; i < R; i++) {
			__m512d t = _mm512_mul_pd(_mm512_mul_pd(_mm512_sub_pd(gp5_ld8(x + (r0 + i) * m + j, k), mv[i]), iv[i]), g);
			_mm256_mask_storeu_ps(y + (r0 + i) * m + j, k, _mm512_cvtpd_ps(_mm512_add_pd(t, b)));
		}
	}
}

// gp5_ln_fwd is lnForward's loop for rows [lo, hi) of m elements.
static void gp5_ln_fwd(const float *x, float *y, long lo, long hi, long m, const double *gamma, const double *beta,
                      double eps, double *mean, double *istd) {
	long r = lo;
	for (; r + 4 <= hi; r += 4) gp5_ln_fwd_rows(4, x, y, r, m, gamma, beta, eps, mean, istd);
	for (; r < hi; r++) gp5_ln_fwd_rows(1, x, y, r, m, gamma, beta, eps, mean, istd);
}

// gp5_ln_bwd_rows is lnBackward's loop for the R rows from r0 (R at most 4), in step: each
// row's sums are their own chains as in the one-row loop, and dgamma and dbeta take the
// rows' terms in row order (in registers, stored once per R rows), so the bits do not
// depend on R.
static inline __attribute__((always_inline)) void gp5_ln_bwd_rows(int R, const float *x, const float *dy, float *dx,
                                                                 long r0, long m, const double *gamma,
                                                                 const double *mean, const double *istd,
                                                                 double *dgamma, double *dbeta) {
	__m512d mv[4], iv[4], a[4], b[4];
	for (int i = 0; i < R; i++) {
		mv[i] = _mm512_set1_pd(mean[r0 + i]);
		iv[i] = _mm512_set1_pd(istd[r0 + i]);
		a[i] = _mm512_setzero_pd();
		b[i] = _mm512_setzero_pd();
	}
	for (long j = 0; j < m; j += 8) {
		__mmask8 k = gp5_mask8(m - j);
		__m512d dg = gp5_ldmd(k, dgamma + j), db = gp5_ldmd(k, dbeta + j);
		__m512d gm = gp5_ldmd(k, gamma + j);
		for (int i = 0; i < R; i++) {
			__m512d xh = _mm512_mul_pd(_mm512_maskz_sub_pd(k, gp5_ld8(x + (r0 + i) * m + j, k), mv[i]), iv[i]);
			__m512d gj = gp5_ld8(dy + (r0 + i) * m + j, k);
			dg = _mm512_fmadd_pd(gj, xh, dg);
			db = _mm512_add_pd(gj, db);
			__m512d gg = _mm512_mul_pd(gj, gm);
			a[i] = _mm512_add_pd(a[i], gg);
			b[i] = _mm512_fmadd_pd(gg, xh, b[i]);
		}
		_mm512_mask_storeu_pd(dgamma + j, k, dg);
		_mm512_mask_storeu_pd(dbeta + j, k, db);
	}
	for (int i = 0; i < R; i++) {
		a[i] = _mm512_set1_pd(_mm512_reduce_add_pd(a[i]) / (double)m);
		b[i] = _mm512_set1_pd(_mm512_reduce_add_pd(b[i]) / (double)m);
	}
	for (long j = 0; j < m; j += 8) {
		__mmask8 k = gp5_mask8(m - j);
		__m512d gm = gp5_ldmd(k, gamma + j);
		for (int i = 0; i < R; i++) {
			__m512d xh = _mm512_mul_pd(_mm512_sub_pd(gp5_ld8(x + (r0 + i) * m + j, k), mv[i]), iv[i]);
			__m512d t = _mm512_sub_pd(_mm512_sub_pd(_mm512_mul_pd(gp5_ld8(dy + (r0 + i) * m + j, k), gm), a[i]),
			                          _mm512_mul_pd(xh, b[i]));
			_mm256_mask_storeu_ps(dx + (r0 + i) * m + j, k, _mm512_cvtpd_ps(_mm512_mul_pd(iv[i], t)));
		}
	}
}

// gp5_ln_bwd is one block of lnBackward: rows [r0, r1), their gamma and beta gradients added
// into dgamma and dbeta (m each), dx written.
static void gp5_ln_bwd(const float *x, const float *dy, float *dx, long r0, long r1, long m, const double *gamma,
                      const double *mean, const double *istd, double *dgamma, double *dbeta) {
	long r = r0;
	for (; r + 4 <= r1; r += 4) gp5_ln_bwd_rows(4, x, dy, dx, r, m, gamma, mean, istd, dgamma, dbeta);
	for (; r < r1; r++) gp5_ln_bwd_rows(1, x, dy, dx, r, m, gamma, mean, istd, dgamma, dbeta);
}

#pragma GCC pop_options
