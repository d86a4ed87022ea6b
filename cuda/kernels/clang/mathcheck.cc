// clang-ptx.sh's host check of nvptx_math.h: each function against the C library's double
// version, rounded to float, over a sweep of its arguments; prints the largest error in
// units in the last place (ulp) and fails above 2 (powf and the 1-ulp-ish functions alike).
#include <math.h>
#include <stdio.h>
#include <string.h>
#define NVPTX_FN static inline
static inline unsigned f2u(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float u2f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
#include "nvptx_math.h"

static double ulps(float got, double want) {
	if (isnan(want)) return isnan(got) ? 0 : 1e9;
	if (isinf(want) || isinf(got)) return (float)want == got ? 0 : 1e9;
	float w = (float)want;
	double ulp = nextafterf(fabsf(w), INFINITY) - fabsf(w);
	if (w == 0 || fabs(want) < 1.2e-38) ulp = 1.4e-45 * 8; // subnormal results: a few denormal steps
	return fabs((double)got - want) / ulp;
}

typedef float (*f1)(float);
typedef double (*d1)(double);
static int check1(const char* name, f1 f, d1 ref, float lo, float hi) {
	double worst = 0; float at = 0;
	for (int i = 0; i <= 2000000; i++) {
		float x = lo + (hi - lo) * (float)i / 2000000.f;
		double e = ulps(f(x), ref((double)x));
		if (e > worst) { worst = e; at = x; }
	}
	printf("%-7s [%g, %g]: max %.2f ulp (at %g)\n", name, lo, hi, worst, at);
	return worst > 2;
}

int main(void) {
	int bad = 0;
	bad |= check1("expf", nvptx_math::expf, exp, -103.9f, 88.7f);
	bad |= check1("logf", nvptx_math::logf, log, 1e-30f, 1e30f);
	bad |= check1("logf", nvptx_math::logf, log, 0.5f, 2.f);
	bad |= check1("log2f", nvptx_math::log2f, log2, 1e-30f, 1e30f);
	bad |= check1("log2f", nvptx_math::log2f, log2, 0.5f, 2.f);
	bad |= check1("log1pf", nvptx_math::log1pf, log1p, -0.999f, 1e4f);
	bad |= check1("log1pf", nvptx_math::log1pf, log1p, -1e-3f, 1e-3f);
	bad |= check1("expm1f", nvptx_math::expm1f, expm1, -20.f, 88.f);
	bad |= check1("expm1f", nvptx_math::expm1f, expm1, -1e-3f, 1e-3f);
	bad |= check1("tanhf", nvptx_math::tanhf, tanh, -12.f, 12.f);
	bad |= check1("sinf", nvptx_math::sinf, sin, -1000.f, 1000.f);
	bad |= check1("cosf", nvptx_math::cosf, cos, -1000.f, 1000.f);
	bad |= check1("erff", nvptx_math::erff, erf, -5.f, 5.f);
	double worst = 0; float au = 0, av = 0;
	for (int i = 0; i <= 2000; i++)
		for (int j = 0; j <= 1000; j++) {
			float u = 1e-3f + 100.f * i / 2000.f, v = -10.f + 20.f * j / 1000.f;
			double e = ulps(nvptx_math::powf(u, v), pow((double)u, (double)v));
			if (e > worst) { worst = e; au = u; av = v; }
		}
	printf("%-7s u [0.001, 100], v [-10, 10]: max %.2f ulp (at %g, %g)\n", "powf", worst, au, av);
	bad |= worst > 2;
	struct { float u, v, want; } sp[] = {{-2, 3, -8}, {-2, 2, 4}, {-2, 0.5f, NAN}, {0, -1, INFINITY}, {-0.f, -1, -INFINITY},
		{0, 2, 0}, {INFINITY, -1, 0}, {-INFINITY, 3, -INFINITY}, {0.5f, INFINITY, 0}, {2, -INFINITY, 0}, {1, NAN, 1}, {NAN, 0, 1}};
	for (auto& c : sp) {
		float got = nvptx_math::powf(c.u, c.v);
		if (!(got == c.want || (isnan(got) && isnan(c.want)))) { printf("powf(%g, %g) = %g, want %g\n", c.u, c.v, got, c.want); bad = 1; }
	}
	printf(bad ? "FAIL\n" : "ok\n");
	return bad;
}
