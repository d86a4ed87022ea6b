// gp_shiftconv is the layout of an implicit convolution's operands (ConvShift in
// convshift_cgo.go), shared by convshift_avx512.h and convshift_avx2.h. Row r = c·kk + q of
// the im2col matrix, at output pixel k, is x[n·xn + c·xc + qoff[q] + k] where bit k%16 of
// mask[q·ceil(P/16) + k/16] is set, 0 where it is not; outputs of the forward are y[n·yn +
// o·yc + k], k < P.
#ifndef GP_SHIFTCONV_H
#define GP_SHIFTCONV_H
typedef struct {
	int C, O, kk;
	long P, xc, xn, yc, yn;
	const int *qoff;            // set by the kernels from their arguments: cgo passes no
	const unsigned short *mask; // Go pointers inside a struct
	// Padded planes (gp_pad_planes), for the kernels that read them: lines of ow pixels
	// (a multiple of 16) lw apart in planes of pp floats, tap q at poff[q]; set by those
	// kernels from their arguments.
	long ow, lw, pp;
	const int *poff;
} gp_shiftconv;

// gp_reads bounds the plain loads of an implicit convolution's x: it sets *qmin to the
// smallest tap offset and *reach to how far the reads of every channel and tap go past the
// first pixel of a read of span floats ((C-1)·xc + the largest tap offset + span), and
// returns x's extent for n images ((n-1)·xn + (C-1)·xc + P floats, what the caller checks).
static inline long gp_reads(const gp_shiftconv *g, long n, long span, long *qmin, long *reach) {
	long lo = g->qoff[0], hi = g->qoff[0];
	for (int q = 1; q < g->kk; q++) {
		if (g->qoff[q] < lo) lo = g->qoff[q];
		if (g->qoff[q] > hi) hi = g->qoff[q];
	}
	*qmin = lo;
	*reach = (long)(g->C - 1) * g->xc + hi + span;
	return (n - 1) * g->xn + (long)(g->C - 1) * g->xc + g->P;
}

// gp_phase_split writes the phase planes of nc planes of x (h×w each) into xp (s² planes
// of oh×ow per plane of x): plane a·s + b holds x[s·i + a, s·j + b] (0 past x's edge), only
// for the phases whose bit is set in used. A copy, the same at every level; stride 2 has
// its own loop, with the stride a constant the compiler vectorises.
static inline __attribute__((always_inline)) void gp_phase_split_s(const float *x, float *xp, long nc, long h, long w,
                                                                   long oh, long ow, const long s,
                                                                   unsigned long long used) {
	long P = oh * ow, hw = h * w;
	for (long p = 0; p < nc; p++) {
		const float *src = x + p * hw;
		for (long a = 0; a < s; a++) {
			for (long b = 0; b < s; b++) {
				if (!((used >> (a * s + b)) & 1)) continue;
				float *d = xp + (p * s * s + a * s + b) * P;
				long wv = b < w ? (w - b + s - 1) / s : 0; // columns of x in this phase
				if (wv > ow) wv = ow;
				for (long i = 0; i < oh; i++) {
					float *row = d + i * ow;
					long ih = s * i + a;
					if (ih >= h) {
						for (long j = 0; j < ow; j++) row[j] = 0;
						continue;
					}
					const float *sr = src + ih * w + b;
					for (long j = 0; j < wv; j++) row[j] = sr[s * j];
					for (long j = wv; j < ow; j++) row[j] = 0;
				}
			}
		}
	}
}

// gp_merge2 interleaves two phase rows into dr (jn pairs), writing 0 for a phase not used.
static inline __attribute__((always_inline)) void gp_merge2(float *dr, const float *s0, const float *s1, long jn,
                                                            const int u0, const int u1) {
	for (long j = 0; j < jn; j++) {
		dr[2 * j] = u0 ? s0[j] : 0;
		dr[2 * j + 1] = u1 ? s1[j] : 0;
	}
}

// gp_phase_merge_s is gp_phase_split_s's inverse for the data gradient: nc planes of dx
// (h×w) from xp, pixels of the phases not in used, and past the planes, 0. Row by row of
// dx, the s phases of a row interleaved in one pass.
static inline __attribute__((always_inline)) void gp_phase_merge_s(const float *xp, float *dx, long nc, long h, long w,
                                                                   long oh, long ow, const long s,
                                                                   unsigned long long used) {
	long P = oh * ow, hw = h * w;
	for (long p = 0; p < nc; p++) {
		float *dst = dx + p * hw;
		const float *pl = xp + p * s * s * P;
		for (long ih = 0; ih < h; ih++) {
			float *dr = dst + ih * w;
			long i = ih / s, a = ih % s;
			if (i >= oh) {
				for (long k = 0; k < w; k++) dr[k] = 0;
				continue;
			}
			// Whole groups of s pixels with j < ow, then the rest pixel by pixel.
			long jn = w / s < ow ? w / s : ow;
			if (s == 2) {
				const float *s0 = pl + (a * 2) * P + i * ow, *s1 = s0 + P;
				switch ((used >> (a * 2)) & 3) {
				case 3: gp_merge2(dr, s0, s1, jn, 1, 1); break;
				case 2: gp_merge2(dr, s0, s1, jn, 0, 1); break;
				case 1: gp_merge2(dr, s0, s1, jn, 1, 0); break;
				default: gp_merge2(dr, s0, s1, jn, 0, 0); break;
				}
			} else {
				for (long b = 0; b < s; b++) {
				if ((used >> (a * s + b)) & 1) {
					const float *sr = pl + (a * s + b) * P + i * ow;
					for (long j = 0; j < jn; j++) dr[s * j + b] = sr[j];
				} else {
					for (long j = 0; j < jn; j++) dr[s * j + b] = 0;
				}
				}
			}
			for (long k = s * jn; k < w; k++) {
				long j = k / s, b = k % s;
				dr[k] = j < ow && ((used >> (a * s + b)) & 1) ? pl[(a * s + b) * P + i * ow + j] : 0;
			}
		}
	}
}

// gp_pad_planes copies nc planes of x (oh×ow each) into xp with a zero border of ph rows
// above and below and pw columns on each side (planes of (oh + 2·ph)·(ow + 2·pw)).
static void gp_pad_planes(const float *x, float *xp, long nc, long oh, long ow, long ph, long pw) {
	long wp = ow + 2 * pw, pp = (oh + 2 * ph) * wp;
	for (long p = 0; p < nc; p++) {
		const float *src = x + p * oh * ow;
		float *d = xp + p * pp;
		for (long i = 0; i < ph * wp; i++) d[i] = 0;
		for (long h = 0; h < oh; h++) {
			float *row = d + (ph + h) * wp;
			for (long i = 0; i < pw; i++) row[i] = 0;
			for (long i = 0; i < ow; i++) row[pw + i] = src[h * ow + i];
			for (long i = 0; i < pw; i++) row[pw + ow + i] = 0;
		}
		for (long i = (ph + oh) * wp; i < pp; i++) d[i] = 0;
	}
}

static void gp_phase_split(const float *x, float *xp, long nc, long h, long w, long oh, long ow, long s,
                           unsigned long long used) {
	if (s == 2)
		gp_phase_split_s(x, xp, nc, h, w, oh, ow, 2, used);
	else
		gp_phase_split_s(x, xp, nc, h, w, oh, ow, s, used);
}

static void gp_phase_merge(const float *xp, float *dx, long nc, long h, long w, long oh, long ow, long s,
                           unsigned long long used) {
	if (s == 2)
		gp_phase_merge_s(xp, dx, nc, h, w, oh, ow, 2, used);
	else
		gp_phase_merge_s(xp, dx, nc, h, w, oh, ow, s, used);
}
#endif
