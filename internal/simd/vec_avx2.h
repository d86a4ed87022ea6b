// AVX2 versions of vec.go's loops, bit for bit the Go loops' operations (no fused
// multiply-adds): eight lanes, the tail in scalar C with the same roundings.

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")

static void gp2_add_to(float *d, const float *s, long n) {
	long i = 0;
	for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(d + i), _mm256_loadu_ps(s + i)));
	for (; i < n; i++) d[i] += s[i];
}

static void gp2_sgd_momentum(float *w, const float *g, float *mom, long n, float lr, float mu) {
	__m256 l = _mm256_set1_ps(lr), u = _mm256_set1_ps(mu);
	long i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_add_ps(_mm256_mul_ps(u, _mm256_loadu_ps(mom + i)), _mm256_loadu_ps(g + i));
		_mm256_storeu_ps(mom + i, v);
		_mm256_storeu_ps(w + i, _mm256_sub_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(l, v)));
	}
	for (; i < n; i++) {
		float v = mu * mom[i] + g[i];
		mom[i] = v;
		w[i] -= lr * v;
	}
}

static void gp2_scale_inplace(float *x, long n, float s) {
	__m256 v = _mm256_set1_ps(s);
	long i = 0;
	for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), v));
	for (; i < n; i++) x[i] *= s;
}

static void gp2_div(float *x, long n, float d) {
	__m256 v = _mm256_set1_ps(d);
	long i = 0;
	for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_div_ps(_mm256_loadu_ps(x + i), v));
	for (; i < n; i++) x[i] /= d;
}

#pragma GCC pop_options
