//go:build !cgo || !amd64 || purego

package simd

// GemmGather32 is the AVX-512 kernel of the cgo build; without it it returns false and the
// caller computes the product its other way.
func GemmGather32(m, n int, a []float32, lda int, ka []int32, bp []float32, kb []int32, c []float32, ldc int) bool {
	return false
}
