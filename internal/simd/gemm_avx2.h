// STUB: the AVX2 versions are being written; gp2_gemm_ready() stays 0 until they are
// (then the AVX2 level is offered, level.go), so nothing calls these.
#include "geom.h"

static void gp2_sgemm_small(int ta, int tb, int m, int n, int k, float alpha, const float *a, long lda, const float *b,
                           long ldb, float *c, long ldc) {}

static int gp2_gemm_ready(void) { return 0; }
