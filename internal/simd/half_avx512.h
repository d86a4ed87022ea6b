// AVX-512 versions of half.go's conversions, bit for bit the Go functions. n is a multiple
// of 16.

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f")

static void gp5_f32_to_bf16(unsigned short *d, const float *s, long n) {
	const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
	const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
	const __m512i quiet = _mm512_set1_epi32(0x00400000);
	for (long i = 0; i < n; i += 16) {
		__m512i b = _mm512_loadu_si512((const void *)(s + i));
		__mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, abs), inf);
		__m512i r = _mm512_add_epi32(b, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(b, 16), one)));
		r = _mm512_srli_epi32(_mm512_mask_blend_epi32(nan, r, _mm512_or_si512(b, quiet)), 16);
		_mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtepi32_epi16(r));
	}
}

static void gp5_bf16_to_f32(float *d, const unsigned short *s, long n) {
	const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
	const __m512i quiet = _mm512_set1_epi32(0x00400000);
	for (long i = 0; i < n; i += 16) {
		__m512i b = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i))), 16);
		__mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, abs), inf);
		_mm512_storeu_si512((void *)(d + i), _mm512_mask_or_epi32(b, nan, b, quiet));
	}
}

static void gp5_f32_to_f16(unsigned short *d, const float *s, long n) {
	for (long i = 0; i < n; i += 16)
		_mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static void gp5_f16_to_f32(float *d, const unsigned short *s, long n) {
	for (long i = 0; i < n; i += 16)
		_mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
}

#pragma GCC pop_options
