/* A fake libcublas for CPU tests with fakecuda.c (device memory is host memory): naive
 * column-major float32 GEMM behind the real cuBLAS signatures, so the tests check the
 * row-major-to-column-major mapping, leading dimensions and strides of the Go side. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
typedef struct { int stream; } handle;
static handle h0;
/* An operand in another device's memory than the current context's fails, as without peer
 * access on a GPU (fakecuda.c's fakeForeign; -1 when it is not loaded). */
static int foreign(const void* p) {
	static int (*f)(uintptr_t);
	if (!f) f = (int (*)(uintptr_t))dlsym(RTLD_DEFAULT, "fakeForeign");
	return p && f ? f((uintptr_t)p) : -1; }
static int offDevice(const void* a, const void* b, const void* c) {
	if (foreign(a) < 0 && foreign(b) < 0 && foreign(c) < 0) return 0;
	fprintf(stderr, "fakecublas: a GEMM operand is in another device's memory\n"); return 1; }
int cublasCreate_v2(handle** h) { *h = &h0; return 0; }
int cublasDestroy_v2(handle* h) { return 0; }
int cublasGetVersion_v2(handle* h, int* v) { *v = 120000; return 0; }
int cublasSetStream_v2(handle* h, void* s) { return 0; }
/* Element i of an operand of cudaDataType t (0 float32, 2 float16, 14 bfloat16) as float. */
static float load(const void* p, int t, long i) {
	if (t == 0) return ((const float*)p)[i];
	unsigned short h = ((const unsigned short*)p)[i];
	if (t == 14) { unsigned u = (unsigned)h << 16; float f; memcpy(&f, &u, 4); return f; }
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1 + m / 1024.0, e - 15);
	return (float)(s ? -v : v);
}
static void gemmT(int ta, int tb, int m, int n, int k, float al, const void* A, int at, int lda, const void* B, int bt, int ldb,
		float be, float* C, int ldc) {
	/* 16-bit operands are widened to float32 first (exact), then column by column of C,
	 * summing over p in order, A's column p contiguous when not transposed. */
	float *wa = 0, *wb = 0;
	if ((at != 0 || ta) && m > 0 && k > 0) {
		/* A widened and, when transposed, stored untransposed (m×k, column p contiguous):
		 * the same products in the same order, without a strided load per product. */
		wa = malloc(sizeof(float) * (long)m * k);
		for (long p = 0; p < k; p++)
			for (long i = 0; i < m; i++) wa[i + p * m] = load(A, at, ta ? p + i * lda : i + p * lda);
		A = wa, at = 0, ta = 0, lda = m;
	}
	if (bt != 0 && n > 0 && k > 0) {
		long ext = tb ? (long)ldb * (k - 1) + n : (long)ldb * (n - 1) + k;
		wb = malloc(sizeof(float) * ext);
		for (long i = 0; i < ext; i++) wb[i] = load(B, bt, i);
		B = wb, bt = 0;
	}
	float* acc = malloc(sizeof(float) * (m > 0 ? m : 1));
	for (int j = 0; j < n; j++) {
		for (int i = 0; i < m; i++) acc[i] = 0;
		for (int p = 0; p < k; p++) {
			float b = tb ? load(B, bt, j + (long)p * ldb) : load(B, bt, p + (long)j * ldb);
			if (at == 0 && !ta) {
				const float* a = (const float*)A + (long)p * lda;
				for (int i = 0; i < m; i++) acc[i] += a[i] * b;
			} else {
				for (int i = 0; i < m; i++) acc[i] += (ta ? load(A, at, p + (long)i * lda) : load(A, at, i + (long)p * lda)) * b;
			}
		}
		for (int i = 0; i < m; i++) C[i + (long)j * ldc] = al * acc[i] + (be != 0 ? be * C[i + (long)j * ldc] : 0);
	}
	free(acc);
	free(wa);
	free(wb);
}
static void gemm(int ta, int tb, int m, int n, int k, float al, const float* A, int lda, const float* B, int ldb, float be, float* C, int ldc) {
	gemmT(ta, tb, m, n, k, al, A, 0, lda, B, 0, ldb, be, C, ldc);
}
int cublasSgemm_v2(handle* h, int ta, int tb, int m, int n, int k, const float* al, const float* A, int lda,
		const float* B, int ldb, const float* be, float* C, int ldc) {
	if (!h || m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7; /* INVALID_VALUE */
	if (offDevice(A, B, C)) return 13; /* EXECUTION_FAILED */
	gemm(ta, tb, m, n, k, *al, A, lda, B, ldb, *be, C, ldc); return 0; }
int cublasGemmEx(handle* h, int ta, int tb, int m, int n, int k, const float* al, const void* A, int at, int lda,
		const void* B, int bt, int ldb, const float* be, void* C, int ct, int ldc, int compute, int algo) {
	if (ct != 0 || at != bt || (at != 0 && at != 2 && at != 14)) return 15; /* NOT_SUPPORTED: float32 output only */
	if (compute != 68 || algo != -1) return 7;
	if (!h || m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
	if (offDevice(A, B, C)) return 13;
	gemmT(ta, tb, m, n, k, *al, A, at, lda, B, bt, ldb, *be, C, ldc); return 0; }
int cublasGemmStridedBatchedEx(handle* h, int ta, int tb, int m, int n, int k, const float* al, const void* A, int at,
		int lda, long long sa, const void* B, int bt, int ldb, long long sb, const float* be, void* C, int ct, int ldc,
		long long sc, int batch, int compute, int algo) {
	for (int i = 0; i < batch; i++) {
		long ea = at == 0 ? 4 : 2, eb = bt == 0 ? 4 : 2;
		int r = cublasGemmEx(h, ta, tb, m, n, k, al, (const char*)A + i * sa * ea, at, lda, (const char*)B + i * sb * eb, bt, ldb,
			be, (float*)C + i * sc, ct, ldc, compute, algo);
		if (r) return r;
	}
	return 0; }
const char* cublasGetStatusString(int s) { return s == 7 ? "CUBLAS_STATUS_INVALID_VALUE" : s == 15 ? "CUBLAS_STATUS_NOT_SUPPORTED" : "fake"; }
