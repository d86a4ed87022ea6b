//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "gemm_avx2.h"
#include "gemm_avx512.h"
#include "softmax_avx512.h"
#include "softmax_avx2.h"

// gp_sgemm_small runs the small GEMM of level 5 (AVX-512) or 2 (AVX2) with subnormal
// operands read as zero and subnormal results written as zero (MXCSR's DAZ and FTZ bits),
// restoring the caller's MXCSR after. See SmallGemm32 for why.
static void gp_sgemm_small(int level, int ta, int tb, int m, int n, int k, float alpha, const float *a, long lda,
                           const float *b, long ldb, float *c, long ldc) {
	unsigned int csr = _mm_getcsr();
	_mm_setcsr(csr | 0x8040);
	if (level == 5)
		gp5_sgemm_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc);
	else
		gp2_sgemm_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc);
	_mm_setcsr(csr);
}
*/
import "C"

// SmallGemmMax bounds SmallGemm32's products: m·n·k at most this, and k·n at most
// SmallGemmMax/16 (op(b) may be copied to the C stack).
const SmallGemmMax = 1 << 18

// SmallGemm32 is c = alpha·op(a)·op(b) (beta 0) for float32, row-major, op(a) m×k and
// op(b) k×n, each element's products over k summed in order with fused multiply-adds (as
// OpenBLAS's kernels do): window attention's small products, where a BLAS call costs as
// much as the arithmetic. m, n, k >= 1 and within SmallGemmMax.
//
// Operands and results below float32's smallest normal magnitude (2⁻¹²⁶) count as zero:
// the probabilities of a shifted window's masked positions are exp(-100)-small subnormals,
// and each FMA with a subnormal operand is a microcode assist on Intel cores (a 49x32x49
// product with half its a subnormal measured 112 µs against 1.1 µs). The difference is at
// most 2⁻¹²⁶·Σ|a·b| per element.
func SmallGemm32(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	l := Current()
	if l == Off || m < 1 || n < 1 || k < 1 || m*n*k > SmallGemmMax || k*n > SmallGemmMax/16 {
		return false
	}
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
	level := C.int(2)
	if l == AVX512 {
		level = 5
	}
	C.gp_sgemm_small(level, cbool(tA), cbool(tB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		f32p(a), C.long(lda), f32p(b), C.long(ldb), f32p(c), C.long(ldc))
	return true
}

// SoftmaxRows32 is models/swin's softmaxRows32: each row of the n×n scores s gets bias (and
// mask, n×n or nil) added, rounded to float32, then its softmax in float64; only the row
// sum's order differs from the Go loop.
func SoftmaxRows32(s []float32, bias []float64, mask []float32, n int) bool {
	l := Current()
	if l == Off {
		return false
	}
	if n == 0 {
		return true
	}
	_, _ = s[n*n-1], bias[n*n-1]
	if mask != nil {
		_ = mask[n*n-1]
	}
	if l == AVX512 {
		C.gp5_softmax_rows(f32p(s), f64p(bias), f32p(mask), C.int(n))
	} else {
		C.gp2_softmax_rows(f32p(s), f64p(bias), f32p(mask), C.int(n))
	}
	return true
}

// SoftmaxBwd is models/swin's softmax gradient for one window and head: with p the
// probabilities and d their gradient (n×n float32), d becomes dS[i,j] = p[i,j]·(d[i,j] -
// Σ_k p[i,k]·d[i,k]) (in float64, rounded) and dS is added into acc (n×n float64).
func SoftmaxBwd(p, d []float32, acc []float64, n int) bool {
	l := Current()
	if l == Off {
		return false
	}
	if n == 0 {
		return true
	}
	_, _, _ = p[n*n-1], d[n*n-1], acc[n*n-1]
	if l == AVX512 {
		C.gp5_softmax_bwd(f32p(p), f32p(d), f64p(acc), C.int(n))
	} else {
		C.gp2_softmax_bwd(f32p(p), f32p(d), f64p(acc), C.int(n))
	}
	return true
}
