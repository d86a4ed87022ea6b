// A CPU emulator for the cuda package's kernels (cuda/kernels/kernels.cu), for tests on
// machines without a GPU: kernels.cu is compiled as C++ after this header, each block's
// threads run as fibers scheduled round-robin, and __syncthreads switches to the next fiber,
// so block-wide reductions in shared memory behave as on a GPU. Blocks run on one thread, or
// on several at once (emu_sched.cc: $GP_EMU_BLOCK_THREADS, 2 under $GP_EMU_SEED), so the
// block indices, shared memory and fibers are per thread and atomicAdd is a real atomic:
// blocks interleave their atomics as on a GPU. 16-bit conversions round to nearest even with
// subnormals and overflow to inf, as the GPU's cvt.rn instructions.
//
// Every kernel thread runs on a stack of EMU_STACK bytes aligned to its size (a fiber's, or
// the runner's stack for kernels without __syncthreads) that holds its emu_frame near the
// bottom: threadIdx and blockIdx are read from the frame found from the stack pointer, with
// no thread-local-storage lookup. blockDim and gridDim are the launch's (one launch at a time
// in the process). Shared memory (sh) is thread-local: the thread running a block owns it.
#include <math.h>
#include <stdint.h>
#include <string.h>

struct dim3 { unsigned x, y, z; };
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };

#define EMU_TLS __attribute__((visibility("hidden"))) thread_local
#define EMU_STACK ((uintptr_t)64 << 10)

// The frame of a stack: its kernel thread's indices and the scheduler's state (emu_sched.cc).
// It lies emu_color(base) bytes above the stack's aligned base, and the stack's top as far
// below its end, so that the frames and tops of a block's fibers, whose stacks are
// consecutive, fall in different cache sets rather than all in one (64 KiB apart).
struct emu_frame {
	dim3 tid, bid;
	unsigned t;             // linear thread index in the block
	struct emu_runner* run; // the scheduler of the thread this stack belongs to
};
static inline uintptr_t emu_color(uintptr_t base) { return ((base / EMU_STACK) & 63) * 64; }
static inline __attribute__((always_inline)) emu_frame* emu_self(void) {
	uintptr_t sp;
#if defined(__x86_64__)
	__asm__("mov %%rsp, %0" : "=r"(sp));
#else
	sp = (uintptr_t)__builtin_frame_address(0);
#endif
	uintptr_t base = sp & ~(EMU_STACK - 1);
	return (emu_frame*)(base + emu_color(base));
}
#define threadIdx (emu_self()->tid)
#define blockIdx (emu_self()->bid)

extern "C" {
extern __attribute__((visibility("hidden"))) dim3 blockDim, gridDim;
void __syncthreads(void);
}

#define __global__
#define __device__
#define __shared__ EMU_TLS

static inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
static inline float atomicAdd(float* p, float v) {
	uint32_t* u = (uint32_t*)p;
	uint32_t o = __atomic_load_n(u, __ATOMIC_RELAXED), n;
	do {
		float f;
		memcpy(&f, &o, 4);
		f += v;
		memcpy(&n, &f, 4);
	} while (!__atomic_compare_exchange_n(u, &o, n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	float r;
	memcpy(&r, &o, 4);
	return r;
}
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
	uint32_t u = f2u(f);
	__nv_bfloat16 r;
	if (isnan(f)) { r.x = (uint16_t)((u >> 16) | 0x40); return r; }
	u += 0x7fff + ((u >> 16) & 1);
	r.x = (uint16_t)(u >> 16);
	return r;
}
static inline float __bfloat162float(__nv_bfloat16 h) { return u2f((uint32_t)h.x << 16); }

// __float2half_rn and __half2float work on the bits: the same results as rounding the
// float's value in double arithmetic to 10 fraction bits (nearest even), for every float.
static inline __half __float2half_rn(float f) {
	uint32_t u = f2u(f), a = u & 0x7fffffff;
	__half r;
	uint16_t sign = (u >> 16) & 0x8000;
	if (a > 0x7f800000) { r.x = sign | 0x7e00; return r; }  // NaN
	if (a >= 0x477ff000) { r.x = sign | 0x7c00; return r; } // 65520 and above round to inf
	if (a < 0x38800000) { // below 2^-14: a subnormal, in units of 2^-24 (an exact scaling)
		r.x = sign | (uint16_t)nearbyintf(u2f(a) * 0x1p24f);
		return r;
	}
	// Rebias the exponent and round the fraction to nearest even; a carry out of the
	// fraction raises the exponent.
	r.x = sign | (uint16_t)(((a + 0xfff + ((a >> 13) & 1)) >> 13) - (112 << 10));
	return r;
}
static inline float __half2float(__half h) {
	uint32_t sign = (uint32_t)(h.x >> 15) << 31, e = (h.x >> 10) & 0x1f, m = h.x & 0x3ff;
	if (e == 0) { float v = (float)m * 0x1p-24f; return sign ? -v : v; }
	if (e == 31) return m ? (sign ? -NAN : NAN) : u2f(sign | 0x7f800000);
	return u2f(sign | (e + 112) << 23 | m << 13);
}
