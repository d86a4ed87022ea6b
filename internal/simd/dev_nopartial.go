//go:build !gp_avx2_partial

package simd

// devPartialAVX2: see dev_partial.go.
const devPartialAVX2 = false
