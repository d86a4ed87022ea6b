// STUB: the AVX2 versions are being written; gp2_conv_ready() stays 0 until they are
// (then the AVX2 level is offered, level.go), so nothing calls these.
#include "geom.h"

static void gp2_im2col_shift(const float *x, float *col, long ld, int lo, int hi, int kk, long P,
			    long hw, const int *shift, const unsigned short *mask) {}
static void gp2_col2im_shift(const float *col, float *dx, long ld, int lo, int hi, int kk, long P,
			    long hw, const int *shift, const unsigned short *mask) {}
static void gp2_im2col(const gp_geom *g, const float *x, float *col, long ld, int lo, int hi) {}
static void gp2_col2im(const gp_geom *g, const float *col, float *dx, long ld, int lo, int hi) {}
static void gp2_im2col_gather(const float *x, float *col, long ld, int lo, int hi, int kk, int P, long hw,
                             const int *gat, const int *padPos, const int *padOff) {}
static void gp2_col2im_indexed_add(const int *idx, long rows, int P, const float *col, float *dx, long ndx, long ld) {}
static void gp2_col_sums(const float *dy, long rows, long c, float *db) {}
static void gp2_maxpool(const gp_geom *g, const float *x, float *y, int *arg, long lo, long hi) {}
static void gp2_maxpool_scatter(const int *arg, const float *dy, float *dx, long lo, long hi, long P, long hw) {}
static void gp2_gelu_fwd(const float *x, float *y, long n) {}
static void gp2_gelu_bwd(const float *x, const float *dy, float *dx, long n) {}

static int gp2_conv_ready(void) { return 0; }
