//go:build !cgo || !amd64 || purego

package simd

// GemmDW32 is the C kernel of the cgo build; without it it returns false and the caller runs
// its BLAS.
func GemmDW32(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	return false
}

// GemmDWFits reports whether GemmDW32 takes this product: never without the C kernels.
func GemmDWFits(m, n, k int) bool { return false }

// GemmDWTakes reports whether GemmDW32 can compute this product: never without the C
// kernels.
func GemmDWTakes(m, n, k int) bool { return false }
