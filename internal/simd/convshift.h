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
} gp_shiftconv;

// gp_phase_split writes the phase planes of nc planes of x (h×w each) into xp (s² planes
// of oh×ow per plane of x): plane a·s + b holds x[s·i + a, s·j + b] (0 past x's edge), only
// for the phases whose bit is set in used. Plain C: a copy, the same at every level.
static void gp_phase_split(const float *x, float *xp, long nc, long h, long w, long oh, long ow, long s,
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

// gp_phase_merge is gp_phase_split's inverse for the data gradient: nc planes of dx (h×w)
// from xp, pixels of the phases not in used, and past the planes, 0.
static void gp_phase_merge(const float *xp, float *dx, long nc, long h, long w, long oh, long ow, long s,
                           unsigned long long used) {
	long P = oh * ow, hw = h * w;
	for (long p = 0; p < nc; p++) {
		float *dst = dx + p * hw;
		for (long k = 0; k < hw; k++) dst[k] = 0;
		for (long a = 0; a < s; a++) {
			for (long b = 0; b < s; b++) {
				if (!((used >> (a * s + b)) & 1)) continue;
				const float *src = xp + (p * s * s + a * s + b) * P;
				long wv = b < w ? (w - b + s - 1) / s : 0;
				if (wv > ow) wv = ow;
				for (long i = 0; i < oh; i++) {
					long ih = s * i + a;
					if (ih >= h) break;
					float *dr = dst + ih * w + b;
					const float *sr = src + i * ow;
					for (long j = 0; j < wv; j++) dr[s * j] = sr[j];
				}
			}
		}
	}
}
#endif
