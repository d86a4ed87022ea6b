// AVX2 (and F16C) versions of half.go's conversions, bit for bit the Go functions. n is a
// multiple of 16.

#include <immintrin.h>
#include <cpuid.h>

static int gp_has_f16c(void) {
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
	return (c & bit_F16C) != 0;
}

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

// Round to nearest even by adding 0x7fff plus the kept lowest bit; NaNs are made quiet first.
static void gp2_f32_to_bf16(unsigned short *d, const float *s, long n) {
	const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
	const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
	const __m256i quiet = _mm256_set1_epi32(0x00400000);
	for (long i = 0; i < n; i += 8) {
		__m256i b = _mm256_loadu_si256((const __m256i *)(s + i));
		__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs), inf);
		__m256i r = _mm256_add_epi32(b, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(b, 16), one)));
		r = _mm256_srli_epi32(_mm256_blendv_epi8(r, _mm256_or_si256(b, quiet), nan), 16);
		__m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
		_mm_storeu_si128((__m128i *)(d + i), p);
	}
}

static void gp2_bf16_to_f32(float *d, const unsigned short *s, long n) {
	const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
	const __m256i quiet = _mm256_set1_epi32(0x00400000);
	for (long i = 0; i < n; i += 8) {
		__m256i b = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i))), 16);
		__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs), inf);
		b = _mm256_or_si256(b, _mm256_and_si256(nan, quiet));
		_mm256_storeu_si256((__m256i *)(d + i), b);
	}
}

static void gp2_f32_to_f16(unsigned short *d, const float *s, long n) {
	for (long i = 0; i < n; i += 8)
		_mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static void gp2_f16_to_f32(float *d, const unsigned short *s, long n) {
	for (long i = 0; i < n; i += 8)
		_mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
}

#pragma GCC pop_options
