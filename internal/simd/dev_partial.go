//go:build gp_avx2_partial

package simd

// devPartialAVX2 offers the AVX2 level before every AVX2 kernel is written (build tag
// gp_avx2_partial), for testing one group of kernels while another is still a stub.
// Development only: never in a release build.
const devPartialAVX2 = true
