//go:build cgo && amd64 && !purego

package swin

// The small GEMMs of window attention in C (simd_gemm.h): OpenBLAS reached 20-45 GFLOP/s
// on them against 80-100 on the Linear layers' products, its per-call packing and dispatch
// costing as much as the arithmetic of a 49×49×32 product.

/*
#cgo CFLAGS: -O3
#include "simd_gemm.h"
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
