// STUB: the AVX2 versions are being written; gp2_norm_ready() stays 0 until they are
// (then the AVX2 level is offered, level.go), so nothing calls these.
#include "geom.h"

static void gp2_bn_sums(const float *x, long n, long c, long hw, long lo, long hi, double *sum, double *sq) {}
static void gp2_bn_grad_sums(const float *x, const float *dy, long n, long c, long hw, long lo, long hi,
                            const double *mean, double *sdy, double *sdyx) {}
static void gp2_relu_sel(const float *v, float *y, const float *sel, long n) {}
static void gp2_scale(const float *x, float *y, long n, float s) {}
static void gp2_bn_apply(const float *x, float *y, long c, long hw, long lo, long hi, const double *mean,
                        const double *istd, const double *gamma, const double *beta, int relu) {}
static void gp2_bn_grad_apply(const float *x, const float *dy, float *dx, long c, long hw, long lo, long hi,
                             const double *k1, const double *k2, const double *k3) {}
static void gp2_ln_fwd(const float *x, float *y, long lo, long hi, long m, const double *gamma, const double *beta,
                      double eps, double *mean, double *istd) {}
static void gp2_ln_bwd(const float *x, const float *dy, float *dx, long r0, long r1, long m, const double *gamma,
                      const double *mean, const double *istd, double *dgamma, double *dbeta) {}

static int gp2_norm_ready(void) { return 0; }
