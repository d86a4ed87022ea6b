// What kernels.cu takes from the CUDA toolkit's headers, for clang's NVPTX backend without
// the toolkit (-nocudainc -nocudalib): the launch attributes and built-in variables, the
// 16-bit types and their round-to-nearest-even conversions (the cvt.rn instructions nvcc's
// headers use), atomics, the barrier, and the float math kernels.cu calls, written here
// because there is no libdevice: within 2 ulp of the correctly rounded float result over the
// ranges the kernels use (clang-ptx.sh's host check measures them against the C library).
// Reduced arguments and the harder functions (powf, erff) are computed in double.
#pragma once
#include <__clang_cuda_builtin_vars.h> // threadIdx, blockIdx, blockDim, gridDim; __syncthreads is a clang builtin

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define NVPTX_FN static __attribute__((device)) __attribute__((always_inline)) inline

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define isnan(x) __builtin_isnan(x)
#define isfinite(x) __builtin_isfinite(x)
#define signbit(x) __builtin_signbit(x)

struct __half { unsigned short x; };
struct __nv_bfloat16 { unsigned short x; };

NVPTX_FN float atomicAdd(float* p, float v) { return __nvvm_atom_add_gen_f(p, v); }
NVPTX_FN unsigned atomicAdd(unsigned* p, unsigned v) { return (unsigned)__nvvm_atom_add_gen_i((int*)p, (int)v); }

NVPTX_FN unsigned f2u(float f) { return __builtin_bit_cast(unsigned, f); }
NVPTX_FN float u2f(unsigned u) { return __builtin_bit_cast(float, u); }

NVPTX_FN __half __float2half_rn(float f) {
	unsigned short h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return __half{h};
}
NVPTX_FN float __half2float(__half h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x));
	return f;
}
NVPTX_FN __nv_bfloat16 __float2bfloat16_rn(float f) {
	unsigned short h;
	asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return __nv_bfloat16{h};
}
NVPTX_FN float __bfloat162float(__nv_bfloat16 h) { return u2f((unsigned)h.x << 16); }

NVPTX_FN float fabsf(float x) { return __builtin_fabsf(x); }
NVPTX_FN float ceilf(float x) { return __builtin_ceilf(x); }
NVPTX_FN float floorf(float x) { return __builtin_floorf(x); }
NVPTX_FN float sqrtf(float x) { return __builtin_sqrtf(x); }
NVPTX_FN float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
NVPTX_FN float rsqrtf(float x) { return __nvvm_rsqrt_approx_f(x); } // nvcc's rsqrtf is rsqrt.approx too

#include "nvptx_math.h"
using nvptx_math::cosf;
using nvptx_math::erff;
using nvptx_math::expf;
using nvptx_math::expm1f;
using nvptx_math::log1pf;
using nvptx_math::log2f;
using nvptx_math::logf;
using nvptx_math::powf;
using nvptx_math::sinf;
using nvptx_math::tanhf;
