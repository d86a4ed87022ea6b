//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f")

static void gp_scale(float *x, long n, float s) {
	__m512 v = _mm512_set1_ps(s);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		_mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), v));
	}
}

static void gp_div(float *x, long n, float d) {
	__m512 v = _mm512_set1_ps(d);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		// Masked-off lanes divide 0 by d: no exception is raised with the default masks.
		_mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), v));
	}
}

#pragma GCC pop_options
*/
import "C"

func scale(x []float32, s float32) { C.gp_scale(fp(x), C.long(len(x)), C.float(s)) }

func div(x []float32, d float32) { C.gp_div(fp(x), C.long(len(x)), C.float(d)) }
