// Vector helpers shared by the AVX-512 kernels (conv_avx512.h, norm_avx512.h,
// vec_avx512.h): lane masks and the loads that take a plain load for a full mask.
#ifndef GP_AVX512_COMMON_H
#define GP_AVX512_COMMON_H

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,fma")

static inline __mmask16 gp5_mask16(long n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

// Note [Masked loads from memory]
// On AMD's Zen 5, a masked load that misses the caches streams at about half the rate of a
// plain one: a 16-lane add over three 64 MiB arrays ran at 57 GB/s with masked loads and
// 105 GB/s with plain ones, one thread; inside L2 and L3 the two were level. So the kernels
// that stream tensors load a full vector with a plain load and keep masked loads for the
// partial vectors at the ends and for lanes that may lie outside the tensor (padding).
// Masked stores run at the plain stores' rate and stay. The lanes loaded are the same, so
// the results are the same bits. gp5_ldm and its kin pick the load by the mask at run time.

// gp5_ldm loads the lanes of m from p, the others 0.
static inline __m512 gp5_ldm(__mmask16 m, const float *p) {
	return m == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

// gp5_ldmi is gp5_ldm for 32-bit integers.
static inline __m512i gp5_ldmi(__mmask16 m, const void *p) {
	return m == 0xffff ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(m, p);
}

// gp5_ldm8 is gp5_ldm for eight lanes.
static inline __m256 gp5_ldm8(__mmask8 m, const float *p) {
	return m == 0xff ? _mm256_loadu_ps(p) : _mm256_maskz_loadu_ps(m, p);
}

// gp5_ldm8i is gp5_ldmi for eight lanes.
static inline __m256i gp5_ldm8i(__mmask8 m, const void *p) {
	return m == 0xff ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi32(m, p);
}

// gp5_ldmd is gp5_ldm for eight doubles.
static inline __m512d gp5_ldmd(__mmask8 m, const double *p) {
	return m == 0xff ? _mm512_loadu_pd(p) : _mm512_maskz_loadu_pd(m, p);
}

#pragma GCC pop_options

#endif
