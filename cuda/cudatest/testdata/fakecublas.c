/* A fake libcublas for CPU tests with fakecuda.c (device memory is host memory): naive
 * column-major float32 GEMM behind the real cuBLAS signatures, so the tests check the
 * row-major-to-column-major mapping, leading dimensions and strides of the Go side. */
#include <stddef.h>
#include <stdint.h>
typedef struct { int stream; } handle;
static handle h0;
int cublasCreate_v2(handle** h) { *h = &h0; return 0; }
int cublasDestroy_v2(handle* h) { return 0; }
int cublasGetVersion_v2(handle* h, int* v) { *v = 120000; return 0; }
int cublasSetStream_v2(handle* h, void* s) { return 0; }
static void gemm(int ta, int tb, int m, int n, int k, float al, const float* A, int lda, const float* B, int ldb, float be, float* C, int ldc) {
	for (int i = 0; i < m; i++) for (int j = 0; j < n; j++) {
		float s = 0;
		for (int p = 0; p < k; p++) {
			float a = ta ? A[p + (long)i * lda] : A[i + (long)p * lda];
			float b = tb ? B[j + (long)p * ldb] : B[p + (long)j * ldb];
			s += a * b;
		}
		C[i + (long)j * ldc] = al * s + (be != 0 ? be * C[i + (long)j * ldc] : 0);
	}
}
int cublasSgemm_v2(handle* h, int ta, int tb, int m, int n, int k, const float* al, const float* A, int lda,
		const float* B, int ldb, const float* be, float* C, int ldc) {
	if (!h || m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7; /* INVALID_VALUE */
	gemm(ta, tb, m, n, k, *al, A, lda, B, ldb, *be, C, ldc); return 0; }
int cublasGemmEx(handle* h, int ta, int tb, int m, int n, int k, const float* al, const void* A, int at, int lda,
		const void* B, int bt, int ldb, const float* be, void* C, int ct, int ldc, int compute, int algo) {
	if (at != 0 || bt != 0 || ct != 0) return 15; /* NOT_SUPPORTED: the fake does float32 only */
	if (compute != 68 || algo != -1) return 7;
	return cublasSgemm_v2(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc); }
int cublasGemmStridedBatchedEx(handle* h, int ta, int tb, int m, int n, int k, const float* al, const void* A, int at,
		int lda, long long sa, const void* B, int bt, int ldb, long long sb, const float* be, void* C, int ct, int ldc,
		long long sc, int batch, int compute, int algo) {
	for (int i = 0; i < batch; i++) {
		int r = cublasGemmEx(h, ta, tb, m, n, k, al, (const float*)A + i * sa, at, lda, (const float*)B + i * sb, bt, ldb,
			be, (float*)C + i * sc, ct, ldc, compute, algo);
		if (r) return r;
	}
	return 0; }
const char* cublasGetStatusString(int s) { return s == 7 ? "CUBLAS_STATUS_INVALID_VALUE" : s == 15 ? "CUBLAS_STATUS_NOT_SUPPORTED" : "fake"; }
