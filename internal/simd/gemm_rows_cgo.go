//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "gemm_rows_avx512.h"
*/
import "C"

// GemmRowsFits reports whether GemmRows32 takes this product at the active level: AVX-512
// only, n a multiple of 16, op(b) at most 768×768, and k at most 768 when b is transposed (a
// linear layer's forward, y = x·wᵀ + b) or 384 when not (its data gradient, dx = dy·w); and
// at least 4096 rows, or at least 1536 with op(b) at most 384×384. Those are the shapes of
// swin_t's first two stages and its third stage's attention projection (1568 rows, 384 by
// 384), where the kernel was measured faster than OpenBLAS at one thread (1.1x to 1.5x per
// layer, the bias in its epilogue included; 1.09x to 1.15x on the projection), and slower
// beyond those k (0.65x on 6272x192x768 untransposed) or at 1568 rows with a larger op(b)
// (0.94x to 0.97x on the third stage's qkv, fc1 and fc2 forwards, about 1.0x on its patch
// merging).
func GemmRowsFits(tB bool, m, n, k int) bool {
	return rowsShape(tB, n, k) && (m >= 4096 || m >= 1536 && k*n <= 384*384)
}

// rowsShape is GemmRowsFits without the bound on rows, which applies to a whole product and
// not to the row blocks it is split into.
func rowsShape(tB bool, n, k int) bool {
	maxK := 384
	if tB {
		maxK = 768
	}
	return GemmRowsTakes(n, k) && n%16 == 0 && k <= maxK && k*n <= 768*768
}

// GemmRowsTakes reports whether GemmRows32 can compute a product with n columns and inner
// dimension k at the active level, whatever its speed against the BLAS: level AVX512, n and
// k positive. GemmRowsFits and GemmRowsConvFits say where it was measured faster than
// OpenBLAS's AVX-512 kernels; a caller whose BLAS runs narrower kernels asks this instead
// (nn/ops's ownGEMM: where OpenBLAS runs its AVX2 kernels on a CPU with full-width AVX-512).
func GemmRowsTakes(n, k int) bool { return Current() == AVX512 && n > 0 && k > 0 }

// GemmRowsConvFits reports whether GemmRows32 takes a convolution's forward product, y (m
// output channels × n pixels) = w (m×k)·cols (k×n), b not transposed: at level AVX512, n =
// 64 (one panel of 64 columns, 6 rows by 4 vectors a step) and k at least 512. Those are
// resnet18's layer2 per image (8x8 outputs) and layer4 at batch 16 (2x2 outputs batched):
// against OpenBLAS 0.3.21 (SkylakeX kernels) at one thread, the products alone 1.13-1.22x
// and those layers' forwards (im2col included) 1.09-1.20x; w is read once, unpacked, and
// only the narrow cols packed. At 256 and 1024 columns the products measured 0.93-1.01x
// and are left to the BLAS.
func GemmRowsConvFits(m, n, k int) bool { return m > 0 && convRowsShape(false, n, k) }

// convRowsShape is GemmRowsConvFits's shape, which GemmRows32 also takes.
func convRowsShape(tB bool, n, k int) bool { return Current() == AVX512 && !tB && n == 64 && k >= 512 }

// GemmRows32 is c = a·op(b) (+ bias on every row when bias is not nil) for float32,
// row-major: a m×k (lda), op(b) k×n (b k×n with ldb, or when tB bᵀ with b n×k), c m×n (ldc),
// bias n or nil. Each element is the sum of its k products in order with fused
// multiply-adds, then the bias added, as OpenBLAS computes it with beta 1 over a bias-filled
// c. It returns false, doing nothing, when m < 1, the shape is not one GemmRowsTakes takes,
// a stride is too short or the kernel's packing buffer (k·n floats) cannot be allocated:
// the caller then runs its BLAS.
func GemmRows32(tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int) bool {
	return gemmRows32(tB, false, m, n, k, a, lda, b, ldb, bias, c, ldc)
}

// GemmRowsAdd32 is GemmRows32 without a bias, adding to c (c += a·op(b)): each element's
// products summed in order with fused multiply-adds from c's element. It returns false,
// doing nothing, where GemmRows32 would.
func GemmRowsAdd32(tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	return gemmRows32(tB, true, m, n, k, a, lda, b, ldb, nil, c, ldc)
}

// gemmRows32 is GemmRows32 (add false) and GemmRowsAdd32 (add true).
func gemmRows32(tB, add bool, m, n, k int, a []float32, lda int, b []float32, ldb int, bias, c []float32, ldc int) bool {
	if m < 1 || !GemmRowsTakes(n, k) || lda < k || ldc < n || (tB && ldb < k) || (!tB && ldb < n) {
		return false
	}
	// The kernel reads and writes without bounds checks: check the last element of each.
	_ = a[(m-1)*lda+k-1]
	if tB {
		_ = b[(n-1)*ldb+k-1]
	} else {
		_ = b[(k-1)*ldb+n-1]
	}
	_ = c[(m-1)*ldc+n-1]
	if bias != nil {
		_ = bias[n-1]
	}
	return C.gp5_sgemm_rows(cbool(tB), cbool(add), C.int(m), C.int(n), C.int(k), f32p(a), C.long(lda), f32p(b), C.long(ldb),
		f32p(bias), f32p(c), C.long(ldc)) != 0
}
