// The float math of kernels.cu for clang's NVPTX backend (no libdevice), in namespace
// nvptx_math so that clang-ptx.sh's host check can compile it beside the C library and
// compare. NVPTX_FN, f2u and u2f come from the includer. Polynomials are Cephes' (S. L.
// Moshier); exp and log in double are series, to double precision, for powf and erff.
#pragma once
namespace nvptx_math {

// x * 2^k for k in [-252, 254] (two exact power-of-two steps keep each factor normal).
NVPTX_FN float scale2f(float x, int k) {
	int k1 = k / 2, k2 = k - k1;
	return x * u2f((unsigned)(k1 + 127) << 23) * u2f((unsigned)(k2 + 127) << 23);
}
NVPTX_FN double scale2(double x, int k) {
	int k1 = k / 2, k2 = k - k1;
	return x * __builtin_bit_cast(double, (unsigned long long)(k1 + 1023) << 52) *
		__builtin_bit_cast(double, (unsigned long long)(k2 + 1023) << 52);
}

NVPTX_FN float expf(float x) {
	if (isnan(x)) return x;
	if (x > 88.72283905f) return INFINITY;
	if (x < -103.972084f) return 0.f;
	float j = __builtin_rintf(x * 1.44269504088896341f);
	float r = __builtin_fmaf(j, -0.693359375f, x);
	r = __builtin_fmaf(j, 2.12194440e-4f, r);
	float p = 1.9875691500e-4f;
	p = __builtin_fmaf(p, r, 1.3981999507e-3f);
	p = __builtin_fmaf(p, r, 8.3334519073e-3f);
	p = __builtin_fmaf(p, r, 4.1665795894e-2f);
	p = __builtin_fmaf(p, r, 1.6666665459e-1f);
	p = __builtin_fmaf(p, r, 5.0000001201e-1f);
	float e = __builtin_fmaf(p, r * r, r) + 1.f;
	return scale2f(e, (int)j);
}

// logf's reduction: x = 2^e * (1 + m), m in [sqrt(1/2)-1, sqrt(2)-1), and m's polynomial
// part (log(1+m) = m - m^2/2 + poly).
NVPTX_FN float logf_poly(float m) {
	float p = 7.0376836292e-2f;
	p = __builtin_fmaf(p, m, -1.1514610310e-1f);
	p = __builtin_fmaf(p, m, 1.1676998740e-1f);
	p = __builtin_fmaf(p, m, -1.2420140846e-1f);
	p = __builtin_fmaf(p, m, 1.4249322787e-1f);
	p = __builtin_fmaf(p, m, -1.6668057665e-1f);
	p = __builtin_fmaf(p, m, 2.0000714765e-1f);
	p = __builtin_fmaf(p, m, -2.4999993993e-1f);
	p = __builtin_fmaf(p, m, 3.3333331174e-1f);
	return p * m * (m * m);
}
// logf_reduce returns false with *special set for x <= 0, inf and NaN.
NVPTX_FN bool logf_reduce(float x, float* m, int* e, float* special) {
	if (isnan(x) || x < 0.f) { *special = NAN; return false; }
	if (x == 0.f) { *special = -INFINITY; return false; }
	if (x == INFINITY) { *special = INFINITY; return false; }
	int e0 = 0;
	if (x < 1.17549435e-38f) { x *= 8388608.f; e0 = -23; }
	unsigned u = f2u(x);
	*e = (int)((u >> 23) & 0xff) - 126 + e0;
	float f = u2f((u & 0x807fffffu) | 0x3f000000u); // [0.5, 1)
	if (f < 0.707106781186547524f) { *e -= 1; f = f + f - 1.f; } else f = f - 1.f;
	*m = f;
	return true;
}
NVPTX_FN float logf(float x) {
	float m, s; int e;
	if (!logf_reduce(x, &m, &e, &s)) return s;
	float fe = (float)e;
	float y = logf_poly(m) - 2.12194440e-4f * fe;
	y = __builtin_fmaf(-0.5f, m * m, y);
	return (m + y) + 0.693359375f * fe;
}
NVPTX_FN float log2f(float x) {
	float m, s; int e;
	if (!logf_reduce(x, &m, &e, &s)) return s;
	float y = __builtin_fmaf(-0.5f, m * m, logf_poly(m));
	const float log2ea = 0.44269504088896340736f; // log2(e) - 1
	float z = y * log2ea;
	z += m * log2ea;
	z += y;
	z += m;
	return z + (float)e;
}
NVPTX_FN float tanhf(float x) {
	float a = fabsf(x);
	if (a < 0.625f) {
		float z = x * x;
		float p = -5.70498872745e-3f;
		p = __builtin_fmaf(p, z, 2.06390887954e-2f);
		p = __builtin_fmaf(p, z, -5.37397155531e-2f);
		p = __builtin_fmaf(p, z, 1.33314422036e-1f);
		p = __builtin_fmaf(p, z, -3.33332819422e-1f);
		return __builtin_fmaf(p * z, x, x);
	}
	if (a > 9.01f) return __builtin_copysignf(1.f, x);
	float r = 1.f - 2.f / (expf(a + a) + 1.f);
	return __builtin_copysignf(r, x);
}

// sin and cos of r in [-pi/4, pi/4].
NVPTX_FN float sin_poly(float r) {
	float z = r * r;
	float p = -1.9515295891e-4f;
	p = __builtin_fmaf(p, z, 8.3321608736e-3f);
	p = __builtin_fmaf(p, z, -1.6666654611e-1f);
	return __builtin_fmaf(p * z, r, r);
}
NVPTX_FN float cos_poly(float r) {
	float z = r * r;
	float p = 2.443315711809948e-5f;
	p = __builtin_fmaf(p, z, -1.388731625493765e-3f);
	p = __builtin_fmaf(p, z, 4.166664568298827e-2f);
	return __builtin_fmaf(p * z, z, __builtin_fmaf(-0.5f, z, 1.f));
}
// x = q*pi/2 + r, reduced in double (exact enough for |x| < 2^20).
NVPTX_FN float quadrant(float x, int* q) {
	double qd = __builtin_rint((double)x * 0.63661977236758134308);
	double r = __builtin_fma(-qd, 1.5707963267948966192, (double)x);
	r = __builtin_fma(-qd, 6.123233995736766036e-17, r);
	*q = (int)((long long)qd & 3);
	return (float)r;
}
NVPTX_FN float sinf(float x) {
	if (!isfinite(x)) return NAN;
	int q;
	float r = quadrant(x, &q);
	switch (q) {
	case 0: return sin_poly(r);
	case 1: return cos_poly(r);
	case 2: return -sin_poly(r);
	default: return -cos_poly(r);
	}
}
NVPTX_FN float cosf(float x) {
	if (!isfinite(x)) return NAN;
	int q;
	float r = quadrant(x, &q);
	switch (q) {
	case 0: return cos_poly(r);
	case 1: return -sin_poly(r);
	case 2: return -cos_poly(r);
	default: return sin_poly(r);
	}
}

// exp and log in double (for |t| < 745 and finite x > 0), to about 1e-16 relative.
NVPTX_FN double exp_d(double t) {
	double j = __builtin_rint(t * 1.4426950408889634074);
	double r = __builtin_fma(-j, 6.93147180369123816490e-01, t);
	r = __builtin_fma(-j, 1.90821492927058770002e-10, r);
	double p = 1.0 / 479001600.0; // Taylor to r^12 over |r| <= ln2/2
	for (int k = 11; k >= 1; k--) p = __builtin_fma(p, r, 1.0 / (k == 11 ? 39916800.0 : k == 10 ? 3628800.0 : k == 9 ? 362880.0 : k == 8 ? 40320.0 : k == 7 ? 5040.0 : k == 6 ? 720.0 : k == 5 ? 120.0 : k == 4 ? 24.0 : k == 3 ? 6.0 : k == 2 ? 2.0 : 1.0));
	return scale2(__builtin_fma(p, r, 1.0), (int)j);
}
NVPTX_FN double log_d(double x) {
	unsigned long long u = __builtin_bit_cast(unsigned long long, x);
	int e = (int)((u >> 52) & 0x7ff) - 1022;
	double f = __builtin_bit_cast(double, (u & 0x800fffffffffffffULL) | 0x3fe0000000000000ULL); // [0.5, 1)
	if (f < 0.70710678118654752440) { e -= 1; f += f; }
	double s = (f - 1.0) / (f + 1.0), s2 = s * s; // log f = 2 atanh(s), |s| <= 0.1716
	double p = 1.0 / 25.0;
	for (int k = 23; k >= 1; k -= 2) p = __builtin_fma(p, s2, 1.0 / k);
	return __builtin_fma(2.0 * s, p, e * 6.93147180559945309417e-01);
}

// log1p and expm1 in double: a short series near 0, else log and exp of 1 + x.
NVPTX_FN float log1pf(float x) {
	if (isnan(x) || x < -1.f) return NAN;
	if (x == -1.f) return -INFINITY;
	if (x == INFINITY) return x;
	double d = x;
	if (fabsf(x) < 1e-4f) return (float)(d * (1.0 - d * (0.5 - d * (1.0 / 3.0))));
	return (float)log_d(1.0 + d);
}
NVPTX_FN float expm1f(float x) {
	if (isnan(x)) return x;
	if (x > 88.72283905f) return INFINITY;
	if (x < -20.f) return -1.f + expf(x);
	double d = x;
	if (fabsf(x) < 1e-4f) return (float)(d * (1.0 + d * (0.5 + d * (1.0 / 6.0 + d * (1.0 / 24.0)))));
	return (float)(exp_d(d) - 1.0);
}

NVPTX_FN bool is_int(float v) { return __builtin_floorf(v) == v; }
NVPTX_FN bool is_odd(float v) { return fabsf(v) < 16777216.f && is_int(v) && ((long long)v & 1); }
// powf as C99 (F.9.4.4), through exp(v * log|u|) in double.
NVPTX_FN float powf(float u, float v) {
	if (v == 0.f || u == 1.f) return 1.f;
	if (isnan(u) || isnan(v)) return NAN;
	float a = fabsf(u);
	if (v == INFINITY || v == -INFINITY) {
		if (a == 1.f) return 1.f;
		return (a < 1.f) == (v > 0.f) ? 0.f : INFINITY;
	}
	bool neg = u < 0.f || (u == 0.f && signbit(u));
	if (u < 0.f && !is_int(v)) return NAN;
	float sign = neg && is_odd(v) ? -1.f : 1.f;
	if (a == 0.f) return sign * (v < 0.f ? INFINITY : 0.f);
	if (a == INFINITY) return sign * (v < 0.f ? 0.f : INFINITY);
	double t = (double)v * log_d((double)a);
	if (t > 89.0) return sign * INFINITY;
	if (t < -104.0) return sign * 0.f;
	return sign * (float)exp_d(t);
}

// erf through its Taylor series near 0 and, beyond, the series of e^{x^2} erf(x) with
// positive terms (no cancellation), in double; float's erf is +-1 from |x| 3.92 on.
NVPTX_FN float erff(float x) {
	float a = fabsf(x);
	if (isnan(x)) return x;
	if (a >= 3.92f) return __builtin_copysignf(1.f, x);
	double xd = a, x2 = xd * xd, s;
	if (a < 1.f) {
		double term = xd;
		s = xd;
		for (int n = 1; n < 40; n++) {
			term *= -x2 / n;
			double t = term / (2 * n + 1);
			s += t;
			if (__builtin_fabs(t) < 1e-17 * s) break;
		}
	} else {
		double term = xd;
		s = xd;
		for (int n = 1; n < 120; n++) {
			term *= 2.0 * x2 / (2 * n + 1);
			s += term;
			if (term < 1e-17 * s) break;
		}
		s *= exp_d(-x2);
	}
	return __builtin_copysignf((float)(s * 1.12837916709551257390), x);
}

} // namespace nvptx_math
