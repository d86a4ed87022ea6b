//go:build !cgo || !amd64 || purego

package swin

// Without cgo (or off amd64) there is no C kernel and gemm always calls the BLAS.

var simdOK = false

func smallGemm32(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, 0, c, ldc)
}

func simdSoftmaxRows32(s []float32, bias []float64, mask []float32, n int) {
	softmaxRows32(s, bias, mask, n)
}

func simdSoftmaxBwd(p, d []float32, acc []float64, n int) {}
