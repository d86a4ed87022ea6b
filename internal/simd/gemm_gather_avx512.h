// A float32 GEMM whose inner dimension is gathered through two tables: c (m×n) = Σ over kk
// of a[i·lda + ka[kk]] · bp[kb[kk] + j]. nn/ops's forward of convolutions over small maps
// uses it to sum only the products of kernel taps that land inside the image: a 3x3
// convolution with padding 1 over a 2x2 map multiplies zeros in 5 of every 9 of im2col's
// products, over a 4x4 map in 44 of 144. Its tables list, for one output pixel, the
// products that are not zeros, in im2col's order; a (the weights) is read where it lies, bp
// (x) is packed by the caller into rows (kb the offset of each) of n columns, zero past n up
// to a multiple of 16. Compiled for AVX-512 and called only at level AVX512.
//
// Each element sums its products in table order with fused multiply-adds from zero, so a
// split of c's rows or columns into calls gives the same bits.
// The micro-kernel keeps MR rows by NV vectors of 16 columns in registers: per product one
// load of each vector of bp's row and one broadcast of a per row.

#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

static inline __attribute__((always_inline)) void gp5g_micro(int MR, int NV, int k, const float *a, long lda,
                                                            const int *ka, const float *bp, const int *kb,
                                                            float *c, long ldc, __mmask16 last) {
	__m512 acc[12][4];
	for (int r = 0; r < MR; r++)
		for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
	// Rows r and r + H share a pointer (H = half of MR, rounded up), the second read at an
	// index H·lda further: half as many registers for the rows' addresses.
	const int H = (MR + 1) / 2;
	const float *rows[6];
	for (int r = 0; r < H; r++) rows[r] = a + r * lda;
	const long hl = H * lda;
	for (int kk = 0; kk < k; kk++) {
		long ia = ka[kk], ib = ia + hl;
		const float *br = bp + kb[kk];
		__m512 bv[4];
		for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(br + 16 * v);
		for (int r = 0; r < MR; r++) {
			__m512 ab = _mm512_set1_ps(r < H ? rows[r][ia] : rows[r - H][ib]);
			for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ab, bv[v], acc[r][v]);
		}
	}
	for (int r = 0; r < MR; r++)
		for (int v = 0; v < NV; v++) {
			__mmask16 mk = v == NV - 1 ? last : 0xffff;
			_mm512_mask_storeu_ps(c + r * ldc + 16 * v, mk, acc[r][v]);
		}
}

// gp5_sgemm_gather is the product above for rows [0, m) and columns [0, n) of c (ldc), k
// products per element.
static void gp5_sgemm_gather(int m, int n, int k, const float *a, long lda, const int *ka, const float *bp,
                             const int *kb, float *c, long ldc) {
	for (int j0 = 0; j0 < n; j0 += 64) {
		int nb = n - j0 < 64 ? n - j0 : 64, nv = (nb + 15) / 16;
		__mmask16 last = nb % 16 == 0 ? 0xffff : (__mmask16)((1u << (nb % 16)) - 1);
		const float *b0 = bp + j0;
		float *c0 = c + j0;
		int i = 0;
#define GP5G(MR, NV) gp5g_micro(MR, NV, k, a + (long)i * lda, lda, ka, b0, kb, c0 + (long)i * ldc, ldc, last)
		switch (nv) {
		case 4:
			for (; i + 6 <= m; i += 6) GP5G(6, 4);
			for (; i < m; i++) GP5G(1, 4);
			break;
		case 3:
			for (; i + 8 <= m; i += 8) GP5G(8, 3);
			for (; i < m; i++) GP5G(1, 3);
			break;
		case 2:
			for (; i + 12 <= m; i += 12) GP5G(12, 2);
			for (; i < m; i++) GP5G(1, 2);
			break;
		default:
			for (; i + 12 <= m; i += 12) GP5G(12, 1);
			for (; i < m; i++) GP5G(1, 1);
		}
#undef GP5G
	}
}

#pragma GCC pop_options
