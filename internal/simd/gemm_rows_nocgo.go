//go:build !cgo || !amd64 || purego

package simd

// GemmRowsFits reports whether GemmRows32 takes this product: never without the C kernels.
func GemmRowsFits(tB bool, m, n, k int) bool { return false }

// GemmRowsTakes reports whether GemmRows32 can compute this product: never without the C
// kernels.
func GemmRowsTakes(n, k int) bool { return false }

// GemmRowsConvFits reports whether GemmRows32 takes a convolution's forward product: never
// without the C kernels.
func GemmRowsConvFits(m, n, k int) bool { return false }

// GemmRows32 is the AVX-512 kernel of the cgo build; without it it returns false and the
// caller runs its BLAS.
func GemmRows32(tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int) bool {
	return false
}

// GemmRowsAdd32 is the AVX-512 kernel of the cgo build; without it it returns false and the
// caller runs its BLAS.
func GemmRowsAdd32(tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	return false
}
