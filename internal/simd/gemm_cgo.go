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

// gp_attn_fwd is window attention's forward for one window, every head, as models/swin's
// attnForward runs it through SmallGemm32 and SoftmaxRows32 (the same kernels, calls and
// bits): per head h, S = scale·Q·Kᵀ into p + h·n·n, its softmax with bias + h·n·n and mask
// (n×n or NULL), then Y = P·V into y's columns of head h. qkv is the window's [n, 3c], y
// its [n, c].
static void gp_attn_fwd(int level, const float *qkv, float *y, float *p, const double *bias, const float *mask,
                        int heads, int n, int c, float scale) {
	int hd = c / heads;
	long ld = 3L * c, nn = (long)n * n;
	for (int h = 0; h < heads; h++) {
		float *s = p + h * nn;
		gp_sgemm_small(level, 0, 1, n, n, hd, scale, qkv + h * hd, ld, qkv + c + h * hd, ld, s, n);
		if (level == 5)
			gp5_softmax_rows(s, bias + h * nn, mask, n);
		else
			gp2_softmax_rows(s, bias + h * nn, mask, n);
		gp_sgemm_small(level, 0, 0, n, hd, n, 1, s, n, qkv + 2 * c + h * hd, ld, y + h * hd, c);
	}
}

// gp_attn_bwd is window attention's backward for one window, every head, as models/swin's
// attnBackward runs it: per head, dV = Pᵀ·dO, dP = dO·Vᵀ into ds (n×n scratch), dS from
// the softmax gradient (added into acc + h·n·n), dQ = scale·dS·K, dK = scale·dSᵀ·Q, into
// dq ([n, 3c]); dy is the window's [n, c].
static void gp_attn_bwd(int level, const float *qkv, const float *dy, float *dq, const float *p, float *ds,
                        double *acc, int heads, int n, int c, float scale) {
	int hd = c / heads;
	long ld = 3L * c, nn = (long)n * n;
	for (int h = 0; h < heads; h++) {
		const float *pr = p + h * nn, *dO = dy + h * hd;
		gp_sgemm_small(level, 1, 0, n, hd, n, 1, pr, n, dO, c, dq + 2 * c + h * hd, ld);
		gp_sgemm_small(level, 0, 1, n, n, hd, 1, dO, c, qkv + 2 * c + h * hd, ld, ds, n);
		if (level == 5)
			gp5_softmax_bwd(pr, ds, acc + h * nn, n);
		else
			gp2_softmax_bwd(pr, ds, acc + h * nn, n);
		gp_sgemm_small(level, 0, 0, n, hd, n, scale, ds, n, qkv + c + h * hd, ld, dq + h * hd, ld);
		gp_sgemm_small(level, 1, 0, n, hd, n, scale, ds, n, qkv + h * hd, ld, dq + c + h * hd, ld);
	}
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
	C.gp_sgemm_small(cLevel(), cbool(tA), cbool(tB), C.int(m), C.int(n), C.int(k), C.float(alpha),
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

// AttnWindowFits reports whether AttnWindowFwd32 and AttnWindowBwd32 take windows of n
// tokens and heads of hd channels at the active level: every product of the window's heads
// within SmallGemm32's bounds.
func AttnWindowFits(n, hd int) bool {
	return Current() != Off && n >= 1 && hd >= 1 && n*n*hd <= SmallGemmMax && n*max(n, hd) <= SmallGemmMax/16
}

// AttnWindowFwd32 is models/swin's window-attention forward for one window and all its
// heads in one call, with the same kernels in the same order as its per-head loop through
// SmallGemm32 and SoftmaxRows32, so the same bits: qkv [n, 3c] (channels ordered 3, heads,
// c/heads), y [n, c], p [heads, n, n] (the probabilities, kept for the backward), bias
// [heads, n, n], mask [n, n] or nil. It returns false, doing nothing, where AttnWindowFits
// does not take the shape or heads does not divide c.
func AttnWindowFwd32(qkv, y, p []float32, bias []float64, mask []float32, heads, n, c int, scale float32) bool {
	if heads < 1 || c%heads != 0 || !AttnWindowFits(n, c/heads) {
		return false
	}
	// The kernels read and write without bounds checks: check the last element of each.
	_, _, _, _ = qkv[n*3*c-1], y[n*c-1], p[heads*n*n-1], bias[heads*n*n-1]
	var mp *C.float
	if mask != nil {
		_ = mask[n*n-1]
		mp = f32p(mask)
	}
	C.gp_attn_fwd(cLevel(), f32p(qkv), f32p(y), f32p(p), f64p(bias), mp, C.int(heads), C.int(n), C.int(c), C.float(scale))
	return true
}

// AttnWindowBwd32 is models/swin's window-attention backward for one window and all its
// heads in one call, as its per-head loop computes it (the same bits): from qkv [n, 3c],
// the output gradient dy [n, c] and the probabilities p [heads, n, n], dq [n, 3c] (dQ, dK,
// dV), with ds [n, n] scratch and the softmax gradients added into acc [heads, n, n]. It
// returns false, doing nothing, where AttnWindowFits does not take the shape or heads does
// not divide c.
func AttnWindowBwd32(qkv, dy, dq, p, ds []float32, acc []float64, heads, n, c int, scale float32) bool {
	if heads < 1 || c%heads != 0 || !AttnWindowFits(n, c/heads) {
		return false
	}
	_, _, _, _, _, _ = qkv[n*3*c-1], dy[n*c-1], dq[n*3*c-1], p[heads*n*n-1], ds[n*n-1], acc[heads*n*n-1]
	C.gp_attn_bwd(cLevel(), f32p(qkv), f32p(dy), f32p(dq), f32p(p), f32p(ds), f64p(acc), C.int(heads), C.int(n),
		C.int(c), C.float(scale))
	return true
}

// cLevel is the C kernels' number of the active level: 5 for AVX512, else 2 (AVX2).
func cLevel() C.int {
	if Current() == AVX512 {
		return 5
	}
	return 2
}
