// STUB: the AVX2 versions are being written; gp2_softmax_ready() stays 0 until they are
// (then the AVX2 level is offered, level.go), so nothing calls these.
#include "geom.h"

static void gp2_softmax_rows(float *s, const double *bias, const float *mask, int n) {}
static void gp2_softmax_bwd(const float *p, float *d, double *acc, int n) {}

static int gp2_softmax_ready(void) { return 0; }
