// AVX-512 versions of vec.go's loops, bit for bit the Go loops' operations (no fused
// multiply-adds).

#include <immintrin.h>
#include "avx512_common.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")
#pragma GCC optimize("fp-contract=off")

static void gp5_add_to(float *d, const float *s, long n) {
	long i = 0;
	for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_add_ps(_mm512_loadu_ps(d + i), _mm512_loadu_ps(s + i)));
	if (i < n) {
		__mmask16 m = gp5_mask16(n - i);
		_mm512_mask_storeu_ps(d + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + i), _mm512_maskz_loadu_ps(m, s + i)));
	}
}

// The Go loop's operations: v = mu*mom + g (two roundings), mom = v, w = w - lr*v.
static void gp5_sgd_momentum(float *w, const float *g, float *mom, long n, float lr, float mu) {
	__m512 l = _mm512_set1_ps(lr), u = _mm512_set1_ps(mu);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp5_mask16(n - i);
		__m512 v = _mm512_add_ps(_mm512_mul_ps(u, gp5_ldm(m, mom + i)), gp5_ldm(m, g + i));
		_mm512_mask_storeu_ps(mom + i, m, v);
		_mm512_mask_storeu_ps(w + i, m, _mm512_sub_ps(gp5_ldm(m, w + i), _mm512_mul_ps(l, v)));
	}
}

static void gp5_scale_inplace(float *x, long n, float s) {
	__m512 v = _mm512_set1_ps(s);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp5_mask16(n - i);
		_mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(gp5_ldm(m, x + i), v));
	}
}

static void gp5_div(float *x, long n, float d) {
	__m512 v = _mm512_set1_ps(d);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp5_mask16(n - i);
		// Masked-off lanes divide 0 by d: no exception is raised with the default masks.
		_mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(gp5_ldm(m, x + i), v));
	}
}

#pragma GCC pop_options
