// AVX-512 versions of vec.go's loops, bit for bit the Go loops' operations (no fused
// multiply-adds).

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC optimize("fp-contract=off")

static inline __mmask16 gp5_vmask(long n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

// gp5_vld loads the lanes of m from p, the others 0: a plain load when m is full, since
// masked loads that miss the caches stream at half the rate on Zen 5 (Note [Masked loads
// from memory] in conv_avx512.h; SGD's step over resnet18's 47 MB ran 2x faster so).
static inline __m512 gp5_vld(__mmask16 m, const float *p) {
	return m == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

static void gp5_add_to(float *d, const float *s, long n) {
	long i = 0;
	for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_add_ps(_mm512_loadu_ps(d + i), _mm512_loadu_ps(s + i)));
	if (i < n) {
		__mmask16 m = gp5_vmask(n - i);
		_mm512_mask_storeu_ps(d + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + i), _mm512_maskz_loadu_ps(m, s + i)));
	}
}

// The Go loop's operations: v = mu*mom + g (two roundings), mom = v, w = w - lr*v.
static void gp5_sgd_momentum(float *w, const float *g, float *mom, long n, float lr, float mu) {
	__m512 l = _mm512_set1_ps(lr), u = _mm512_set1_ps(mu);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp5_vmask(n - i);
		__m512 v = _mm512_add_ps(_mm512_mul_ps(u, gp5_vld(m, mom + i)), gp5_vld(m, g + i));
		_mm512_mask_storeu_ps(mom + i, m, v);
		_mm512_mask_storeu_ps(w + i, m, _mm512_sub_ps(gp5_vld(m, w + i), _mm512_mul_ps(l, v)));
	}
}

static void gp5_scale_inplace(float *x, long n, float s) {
	__m512 v = _mm512_set1_ps(s);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp5_vmask(n - i);
		_mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(gp5_vld(m, x + i), v));
	}
}

static void gp5_div(float *x, long n, float d) {
	__m512 v = _mm512_set1_ps(d);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp5_vmask(n - i);
		// Masked-off lanes divide 0 by d: no exception is raised with the default masks.
		_mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(gp5_vld(m, x + i), v));
	}
}

#pragma GCC pop_options
