// Vector helpers shared by the AVX2 kernels (conv_avx2.h, norm_avx2.h, gemm_avx2.h,
// softmax_avx2.h) and the AVX-512 small GEMM's transpose: lane masks, widening masked loads, partial stores and the horizontal sum
// in the order of GCC's _mm512_reduce_add_pd. Tails are partial plain stores, not masked
// ones: vmaskmovps to memory is microcoded on AMD's cores (about 20 cycles on Zen 4,
// against one for a plain store). Masked loads are cheap and fault-free.
#ifndef GP_AVX2_COMMON_H
#define GP_AVX2_COMMON_H

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")

// gp2v_m4 is the maskload mask of the first r of four 32-bit lanes (none when r <= 0).
static inline __m128i gp2v_m4(long r) {
	return _mm_cmpgt_epi32(_mm_set1_epi32((int)(r < 4 ? r : 4)), _mm_setr_epi32(0, 1, 2, 3));
}

// gp2v_m8 is the maskload mask of the first r of eight 32-bit lanes (none when r <= 0).
static inline __m256i gp2v_m8(long r) {
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(r < 8 ? r : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// gp2v_w is a four-lane mask widened to the four 64-bit lanes of a __m256d (the sign
// extension keeps all ones).
static inline __m256i gp2v_w(__m128i m) { return _mm256_cvtepi32_epi64(m); }

// gp2v_ld4 widens four floats to doubles; masked lanes read as 0 unless full, as
// _mm512_maskz_loadu.
static inline __attribute__((always_inline)) __m256d gp2v_ld4(const float *p, int full, __m128i m) {
	return _mm256_cvtps_pd(full ? _mm_loadu_ps(p) : _mm_maskload_ps(p, m));
}

// gp2v_ldd loads four doubles (masked lanes 0 unless full).
static inline __attribute__((always_inline)) __m256d gp2v_ldd(const double *p, int full, __m128i m) {
	return full ? _mm256_loadu_pd(p) : _mm256_maskload_pd(p, gp2v_w(m));
}

// gp2v_bits is the lane mask of the low eight bits of b (bit t keeps lane t): the
// broadcast bits and'ed with each lane's own bit equal it exactly where that bit is set.
static inline __m256i gp2v_bits(unsigned b) {
	const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
	return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(b & 0xff)), bit), bit);
}

// gp2v_bits16 is the two lane masks of the 16 bits of b (bit t keeps pixel t; lo: pixels
// 0-7, hi: 8-15), from one broadcast.
static inline void gp2v_bits16(unsigned b, __m256i *lo, __m256i *hi) {
	const __m256i bl = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
	const __m256i bh = _mm256_setr_epi32(256, 512, 1024, 2048, 4096, 8192, 16384, 32768);
	__m256i v = _mm256_set1_epi32((int)b);
	*lo = _mm256_cmpeq_epi32(_mm256_and_si256(v, bl), bl);
	*hi = _mm256_cmpeq_epi32(_mm256_and_si256(v, bh), bh);
}

// gp2v_stp stores the first r (0 to 7) floats of v in at most three plain stores.
static inline void gp2v_stp(float *p, __m256 v, long r) {
	__m128 h = _mm256_castps256_ps128(v);
	if (r >= 4) {
		_mm_storeu_ps(p, h);
		h = _mm256_extractf128_ps(v, 1);
		p += 4;
		r -= 4;
	}
	if (r >= 2) {
		_mm_storel_pi((__m64 *)p, h);
		h = _mm_movehl_ps(h, h);
		p += 2;
		r -= 2;
	}
	if (r >= 1) _mm_store_ss(p, h);
}

// gp2v_stpd stores the first r (at most 4; none when r <= 0) doubles of v.
static inline void gp2v_stpd(double *p, __m256d v, long r) {
	if (r >= 4) {
		_mm256_storeu_pd(p, v);
		return;
	}
	__m128d h = _mm256_castpd256_pd128(v);
	if (r >= 2) {
		_mm_storeu_pd(p, h);
		h = _mm256_extractf128_pd(v, 1);
		p += 2;
		r -= 2;
	}
	if (r >= 1) _mm_store_sd(p, h);
}

// gp2v_hsum is _mm512_reduce_add_pd of the eight lanes (lo, hi) in GCC's order: the halves
// added, then the 128-bit halves, then the pair.
static inline double gp2v_hsum(__m256d lo, __m256d hi) {
	__m256d t = _mm256_add_pd(hi, lo);
	__m128d u = _mm_add_pd(_mm256_extractf128_pd(t, 1), _mm256_castpd256_pd128(t));
	return _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
}

// gp2g_transpose sets bt (k×n, row-major) to bᵀ for b n×k (ldb), in 8×8 tiles transposed in
// registers; partial tiles read (masked) and write only their elements.
static inline void gp2g_transpose(const float *b, long ldb, int n, int k, float *bt) {
	for (int j0 = 0; j0 < n; j0 += 8) {
		int jr = n - j0 < 8 ? n - j0 : 8;
		for (int k0 = 0; k0 < k; k0 += 8) {
			int kr = k - k0 < 8 ? k - k0 : 8;
			__m256i mk = gp2v_m8(kr);
			__m256 r[8];
			for (int t = 0; t < 8; t++) {
				const float *p = b + (j0 + t) * ldb + k0;
				r[t] = t >= jr ? _mm256_setzero_ps() : kr == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mk);
			}
			__m256 u0 = _mm256_unpacklo_ps(r[0], r[1]), u1 = _mm256_unpackhi_ps(r[0], r[1]);
			__m256 u2 = _mm256_unpacklo_ps(r[2], r[3]), u3 = _mm256_unpackhi_ps(r[2], r[3]);
			__m256 u4 = _mm256_unpacklo_ps(r[4], r[5]), u5 = _mm256_unpackhi_ps(r[4], r[5]);
			__m256 u6 = _mm256_unpacklo_ps(r[6], r[7]), u7 = _mm256_unpackhi_ps(r[6], r[7]);
			__m256 s0 = _mm256_shuffle_ps(u0, u2, 0x44), s1 = _mm256_shuffle_ps(u0, u2, 0xee);
			__m256 s2 = _mm256_shuffle_ps(u1, u3, 0x44), s3 = _mm256_shuffle_ps(u1, u3, 0xee);
			__m256 s4 = _mm256_shuffle_ps(u4, u6, 0x44), s5 = _mm256_shuffle_ps(u4, u6, 0xee);
			__m256 s6 = _mm256_shuffle_ps(u5, u7, 0x44), s7 = _mm256_shuffle_ps(u5, u7, 0xee);
			__m256 o[8] = {_mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
			               _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
			               _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
			               _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31)};
			for (int t = 0; t < kr; t++) {
				float *q = bt + (long)(k0 + t) * n + j0;
				if (jr == 8)
					_mm256_storeu_ps(q, o[t]);
				else
					gp2v_stp(q, o[t], jr);
			}
		}
	}
}

#pragma GCC pop_options

#endif
