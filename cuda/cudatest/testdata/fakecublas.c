/* A fake libcublas for CPU tests with fakecuda.c (device memory is host memory): naive
 * column-major float32 GEMM behind the real cuBLAS signatures, so the tests check the
 * row-major-to-column-major mapping, leading dimensions and strides of the Go side. A GEMM
 * runs on the handle's stream (cublasSetStream) through fakecuda.c's fakeStreamOp, which
 * checks the operands' bytes against the other streams' work (fakestreams.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
typedef struct { void* stream; } handle;
/* An operand in another device's memory than the current context's fails, as without peer
 * access on a GPU (fakecuda.c's fakeForeign; -1 when it is not loaded). */
static int foreign(const void* p) {
	static int (*f)(uintptr_t);
	if (!f) f = (int (*)(uintptr_t))dlsym(RTLD_DEFAULT, "fakeForeign");
	return p && f ? f((uintptr_t)p) : -1; }
static int offDevice(const void* a, const void* b, const void* c) {
	if (foreign(a) < 0 && foreign(b) < 0 && foreign(c) < 0) return 0;
	fprintf(stderr, "fakecublas: a GEMM operand is in another device's memory\n"); return 1; }
int cublasCreate_v2(handle** h) { *h = calloc(1, sizeof(handle)); return *h ? 0 : 3; /* ALLOC_FAILED */ }
int cublasDestroy_v2(handle* h) { free(h); return 0; }
int cublasGetVersion_v2(handle* h, int* v) { *v = 120000; return 0; }
int cublasSetStream_v2(handle* h, void* s) { if (!h) return 1; h->stream = s; return 0; }
typedef struct { uintptr_t p; size_t n; int write, arg; } fakeAccess;
typedef int (*streamop_fn)(void*, const char*, const fakeAccess*, int, int (*)(void*), void*, void (*)(void*));
/* submit runs fn(arg) on stream st through fakeStreamOp (at once without it) and frees arg;
 * 999 is a race the checker found. */
static int submit(void* st, const char* op, const fakeAccess* a, int na, int (*fn)(void*), void* arg) {
	static streamop_fn f;
	static int tried;
	if (!tried) f = (streamop_fn)dlsym(RTLD_DEFAULT, "fakeStreamOp"), tried = 1;
	if (!f) { int rc = fn(arg); free(arg); return rc; }
	return f(st, op, a, na, fn, arg, free); }
/* extent is the bytes of a column-major rows×cols operand with leading dimension ld. */
static size_t extent(long rows, long cols, long ld, long es) { return rows > 0 && cols > 0 ? (size_t)(((cols - 1) * ld + rows) * es) : 0; }
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
typedef struct {
	int ta, tb, m, n, k, at, lda, bt, ldb, ldc, batch;
	float al, be;
	const void *A, *B;
	float* C;
	long long sa, sb, sc;
} job;
static int runJob(void* p) {
	job* j = p;
	long ea = j->at == 0 ? 4 : 2, eb = j->bt == 0 ? 4 : 2;
	for (int i = 0; i < j->batch; i++)
		gemmT(j->ta, j->tb, j->m, j->n, j->k, j->al, (const char*)j->A + i * j->sa * ea, j->at, j->lda,
			(const char*)j->B + i * j->sb * eb, j->bt, j->ldb, j->be, j->C + i * j->sc, j->ldc);
	return 0; }
/* enqueueJob checks j's operands (every batch's extent) and runs it on h's stream. */
static int enqueueJob(handle* h, const char* op, job j) {
	job* p = malloc(sizeof *p);
	if (!p) return 3;
	*p = j;
	long ea = j.at == 0 ? 4 : 2, eb = j.bt == 0 ? 4 : 2, b = j.batch - 1;
	fakeAccess acc[3] = {
		{(uintptr_t)j.A, (size_t)(b * j.sa * ea) + extent(j.ta ? j.k : j.m, j.ta ? j.m : j.k, j.lda, ea), 0, 0},
		{(uintptr_t)j.B, (size_t)(b * j.sb * eb) + extent(j.tb ? j.n : j.k, j.tb ? j.k : j.n, j.ldb, eb), 0, 1},
		{(uintptr_t)j.C, (size_t)(b * j.sc * 4) + extent(j.m, j.n, j.ldc, 4), 1, 2}};
	int rc = submit(h->stream, op, acc, 3, runJob, p);
	return rc == 999 ? 13 : rc; /* EXECUTION_FAILED: the race is in fakeRaceText */ }
int cublasSgemm_v2(handle* h, int ta, int tb, int m, int n, int k, const float* al, const float* A, int lda,
		const float* B, int ldb, const float* be, float* C, int ldc) {
	if (!h || m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7; /* INVALID_VALUE */
	if (offDevice(A, B, C)) return 13; /* EXECUTION_FAILED */
	return enqueueJob(h, "cublasSgemm", (job){ta, tb, m, n, k, 0, lda, 0, ldb, ldc, 1, *al, *be, A, B, C, 0, 0, 0}); }
static int gemmExCheck(handle* h, int ta, int tb, int m, int n, int k, int at, int lda, int bt, int ldb, int ct, int ldc, int compute, int algo) {
	if (ct != 0 || at != bt || (at != 0 && at != 2 && at != 14)) return 15; /* NOT_SUPPORTED: float32 output only */
	if (compute != 68 || algo != -1) return 7;
	if (!h || m < 0 || n < 0 || k < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
	return 0; }
int cublasGemmEx(handle* h, int ta, int tb, int m, int n, int k, const float* al, const void* A, int at, int lda,
		const void* B, int bt, int ldb, const float* be, void* C, int ct, int ldc, int compute, int algo) {
	int r = gemmExCheck(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute, algo);
	if (r) return r;
	if (offDevice(A, B, C)) return 13;
	return enqueueJob(h, "cublasGemmEx", (job){ta, tb, m, n, k, at, lda, bt, ldb, ldc, 1, *al, *be, A, B, C, 0, 0, 0}); }
int cublasGemmStridedBatchedEx(handle* h, int ta, int tb, int m, int n, int k, const float* al, const void* A, int at,
		int lda, long long sa, const void* B, int bt, int ldb, long long sb, const float* be, void* C, int ct, int ldc,
		long long sc, int batch, int compute, int algo) {
	int r = gemmExCheck(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute, algo);
	if (r) return r;
	if (batch <= 0) return 0;
	if (offDevice(A, B, C)) return 13;
	return enqueueJob(h, "cublasGemmStridedBatchedEx", (job){ta, tb, m, n, k, at, lda, bt, ldb, ldc, batch, *al, *be, A, B, C, sa, sb, sc}); }
const char* cublasGetStatusString(int s) { return s == 7 ? "CUBLAS_STATUS_INVALID_VALUE" : s == 15 ? "CUBLAS_STATUS_NOT_SUPPORTED" : "fake"; }
