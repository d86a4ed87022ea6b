//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include <immintrin.h>

static int gp_vec_ok(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f");
}

#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC optimize("fp-contract=off")

static inline __mmask16 gp_vmask(long n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

static void gp_add_to(float *d, const float *s, long n) {
	long i = 0;
	for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_add_ps(_mm512_loadu_ps(d + i), _mm512_loadu_ps(s + i)));
	if (i < n) {
		__mmask16 m = gp_vmask(n - i);
		_mm512_mask_storeu_ps(d + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + i), _mm512_maskz_loadu_ps(m, s + i)));
	}
}

// The Go loop's operations: v = mu*mom + g (two roundings), mom = v, w = w - lr*v.
static void gp_sgd_momentum(float *w, const float *g, float *mom, long n, float lr, float mu) {
	__m512 l = _mm512_set1_ps(lr), u = _mm512_set1_ps(mu);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = gp_vmask(n - i);
		__m512 v = _mm512_add_ps(_mm512_mul_ps(u, _mm512_maskz_loadu_ps(m, mom + i)), _mm512_maskz_loadu_ps(m, g + i));
		_mm512_mask_storeu_ps(mom + i, m, v);
		_mm512_mask_storeu_ps(w + i, m, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_mul_ps(l, v)));
	}
}

#pragma GCC pop_options
*/
import "C"

import "unsafe"

// enabled is a variable so that tests can compare the C kernels with the Go loops.
var enabled = C.gp_vec_ok() != 0

func fp(s []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(s))) }

func addTo(dst, src []float32) {
	dst = dst[:len(src)]
	C.gp_add_to(fp(dst), fp(src), C.long(len(src)))
}

func sgdMomentum(w, g, mom []float32, lr, mu float32) {
	g, mom = g[:len(w)], mom[:len(w)]
	C.gp_sgd_momentum(fp(w), fp(g), fp(mom), C.long(len(w)), C.float(lr), C.float(mu))
}
