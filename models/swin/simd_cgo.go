//go:build cgo && amd64 && !purego

package swin

// Window attention's inner loops in C: its small GEMMs (simd_gemm.h), on which OpenBLAS
// reached 20-45 GFLOP/s against 80-100 on the Linear layers' products, its per-call packing
// and dispatch costing as much as the arithmetic of a 49×49×32 product; and its softmax
// (simd_softmax.h), whose float64 exponential Go runs one element at a time.

/*
#cgo CFLAGS: -O3
#include "simd_gemm.h"
#include "simd_softmax.h"
*/
import "C"

import "unsafe"

// simdOK reports whether the CPU runs the AVX-512 kernel; a variable so that tests can
// compare with OpenBLAS.
var simdOK = C.gp_swin_simd_ok() != 0

// smallGemm32 is c = alpha·op(a)·op(b) (beta 0) for float32, m, n, k >= 1 and k·n at most
// smallGemmMax (op(b) may be copied to the C stack).
func smallGemm32(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	// The kernel reads and writes without bounds checks: check the last element of each.
	if tA {
		_ = a[(k-1)*lda+m-1]
	} else {
		_ = a[(m-1)*lda+k-1]
	}
	if tB {
		_ = b[(n-1)*ldb+k-1]
	} else {
		_ = b[(k-1)*ldb+n-1]
	}
	_ = c[(m-1)*ldc+n-1]
	C.gp_sgemm_small(cbool(tA), cbool(tB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.long(lda), (*C.float)(unsafe.Pointer(&b[0])), C.long(ldb),
		(*C.float)(unsafe.Pointer(&c[0])), C.long(ldc))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// simdSoftmaxRows32 is softmaxRows32 on AVX-512: s and bias n×n, mask n×n or nil.
func simdSoftmaxRows32(s []float32, bias []float64, mask []float32, n int) {
	if n == 0 {
		return
	}
	_, _ = s[n*n-1], bias[n*n-1]
	var mp *C.float
	if mask != nil {
		_ = mask[n*n-1]
		mp = (*C.float)(unsafe.Pointer(&mask[0]))
	}
	C.gp_softmax_rows((*C.float)(unsafe.Pointer(&s[0])), (*C.double)(unsafe.Pointer(&bias[0])), mp, C.int(n))
}

// simdSoftmaxBwd is attnBackward's softmax gradient for one window and head (p, d n×n,
// float32; acc n×n float64): d becomes dS, and dS is added into acc.
func simdSoftmaxBwd(p, d []float32, acc []float64, n int) {
	if n == 0 {
		return
	}
	_, _, _ = p[n*n-1], d[n*n-1], acc[n*n-1]
	C.gp_softmax_bwd((*C.float)(unsafe.Pointer(&p[0])), (*C.float)(unsafe.Pointer(&d[0])),
		(*C.double)(unsafe.Pointer(&acc[0])), C.int(n))
}
