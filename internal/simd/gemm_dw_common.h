// The prefetch of gemm_dw_avx512.h and gemm_dw_avx2.h: while one block of k rows is
// multiplied, the next block's rows of a and b are fetched into L2, a few lines before each
// micro-kernel call, so that packing them does not wait on memory. Without it, swin_t's
// first-stage shapes (96 to 384 channels, where a block's arithmetic is short against its
// data) spent about a third of their time packing.
#ifndef GP_GEMM_DW_COMMON_H
#define GP_GEMM_DW_COMMON_H

#include <immintrin.h>

#ifndef GPDW_KC
#define GPDW_KC 128
#endif

// gpdw_pf walks the cache lines of the next block's rows: region 0 (a's) then region 1
// (b's), each a contiguous span of memory from p[i], n[i] lines.
typedef struct {
	const char *p[2];
	long n[2];
} gpdw_pf;

// gpdw_pf_init sets q to the rows [r0, r1) of a (lda) and b (ldb).
static inline void gpdw_pf_init(gpdw_pf *q, const float *a, long lda, const float *b, long ldb, long r0, long r1) {
	q->p[0] = (const char *)(a + r0 * lda);
	q->p[1] = (const char *)(b + r0 * ldb);
	q->n[0] = r1 > r0 ? ((r1 - r0) * lda * 4 + 63) / 64 : 0;
	q->n[1] = r1 > r0 ? ((r1 - r0) * ldb * 4 + 63) / 64 : 0;
}

// gpdw_pf_take hands out the next at most max lines of the walk, from one region: *p, the
// count returned.
static inline long gpdw_pf_take(gpdw_pf *q, long max, const char **p) {
	int i = q->n[0] > 0 ? 0 : 1;
	long t = q->n[i] < max ? q->n[i] : max;
	*p = q->p[i];
	q->p[i] += 64 * t;
	q->n[i] -= t;
	return t;
}

// gpdw_pf_rest prefetches what is left of the walk.
static inline void gpdw_pf_rest(gpdw_pf *q) {
	for (int i = 0; i < 2; i++)
		for (long l = 0; l < q->n[i]; l++) _mm_prefetch(q->p[i] + 64 * l, _MM_HINT_T1);
	q->n[0] = q->n[1] = 0;
}

#endif
