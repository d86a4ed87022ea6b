/* A fake libcuda.so.1 for CPU tests: "device" memory is host memory, streams and events
 * complete at the call or, with $GP_EMU_SEED, on a thread per stream under a stream-order
 * checker (fakestreams.h), modules keep their PTX text and cuModuleGetFunction finds a kernel only
 * when the text declares ".entry <name>(" (or, with the kernel emulator loaded, when the
 * emulator has it: kernels.cu's pending kernels, not in the committed PTX yet), and
 * cuLaunchKernel only counts launches unless $GP_FAKE_KERNELS names the emulator.
 * $GP_FAKE_DEVICES (default 1, at most 16) sets how many devices there are: each has its own
 * primary context and its own count of allocated bytes, which cuMemGetInfo reports for the
 * current context's device; devices are peers, and copies between them (cuMemcpyDtoD under
 * unified addressing, cuMemcpyPeer) are memmove. $GP_FAKE_DEVICE_MEM (bytes) makes each device
 * that big and cuMemAlloc fail with out of memory beyond it; unset, each reports 1 GiB and
 * allocations are not limited. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <dlfcn.h>
#include <pthread.h>
typedef int CUresult;
static long launches;
int cuInit(unsigned f) { return 0; }
int cuDriverGetVersion(int* v) { *v = 12040; return 0; }
#define MAXDEV 16
/* limit is $GP_FAKE_DEVICE_MEM, 0 when unset (no limit); total is what devices report. */
static size_t limit(void) { const char* v = getenv("GP_FAKE_DEVICE_MEM"); return v && *v ? (size_t)strtoull(v, 0, 10) : 0; }
static size_t total(void) { size_t l = limit(); return l ? l : (size_t)1 << 30; }
/* Read at each call, so that a test may set it after the library is loaded. */
static int ndev(void) { const char* v = getenv("GP_FAKE_DEVICES"); int n = v ? atoi(v) : 1; return n < 1 ? 1 : n > MAXDEV ? MAXDEV : n; }
/* A primary context is its device's slot; the current one is per thread, as the driver's. */
static struct fakeCtx { int dev; } ctxs[MAXDEV] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};
static __thread int cur;
static size_t used[MAXDEV];
int cuDeviceGetCount(int* n) { *n = ndev(); return 0; }
int cuDeviceGet(int* d, int o) { if (o < 0 || o >= ndev()) return 101; *d = o; return 0; }
int cuDeviceGetName(char* n, int l, int d) { strncpy(n, "Fake GPU", l); return 0; }
/* 41 is CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING. */
int cuDeviceGetAttribute(int* v, int a, int d) { *v = a == 75 ? 9 : a == 76 ? 0 : a == 16 ? 4 : a == 41 ? 1 : 0; return 0; }
int cuDeviceTotalMem_v2(size_t* b, int d) { *b = total(); return 0; }
int cuDeviceCanAccessPeer(int* can, int d, int peer) {
	if (d < 0 || d >= ndev() || peer < 0 || peer >= ndev()) return 101;
	*can = d != peer; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { if (d < 0 || d >= ndev()) return 101; *c = &ctxs[d]; return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { return 0; }
int cuCtxSetCurrent(void* c) { if (c) cur = ((struct fakeCtx*)c)->dev; return 0; }
int cuCtxGetDevice(int* d) { *d = cur; return 0; }
int cuCtxEnablePeerAccess(void* peer, unsigned f) { return peer && ((struct fakeCtx*)peer)->dev != cur ? 0 : 1; }
/* Allocations carry a 16-byte header (size, device) so that a free is counted against the
 * device that allocated; the pointer handed out stays 16-byte aligned, as calloc's. */
/* Live allocations by address, recorded while there are several devices: a kernel launched
 * on one device with a pointer argument into another device's allocation is an illegal
 * address, as on GPUs without peer access (nothing here enables it), and the launch fails
 * naming both devices. fakeForeign is the same check for the other fake libraries. */
static struct span { uintptr_t lo, hi; int dev; } *spans;
static size_t nspans, capspans;
static pthread_mutex_t spanMu = PTHREAD_MUTEX_INITIALIZER;
/* spanFind is the first index whose span starts after p; spanMu held. */
static size_t spanFind(uintptr_t p) {
	size_t a = 0, b = nspans;
	while (a < b) { size_t m = (a + b) / 2; if (spans[m].lo <= p) a = m + 1; else b = m; }
	return a; }
static void spanAdd(uintptr_t lo, size_t n, int dev) {
	pthread_mutex_lock(&spanMu);
	if (nspans == capspans) {
		size_t c = capspans ? 2 * capspans : 256;
		struct span* s = realloc(spans, c * sizeof *s);
		if (!s) { pthread_mutex_unlock(&spanMu); return; }
		spans = s, capspans = c;
	}
	size_t i = spanFind(lo);
	memmove(&spans[i + 1], &spans[i], (nspans - i) * sizeof *spans);
	spans[i].lo = lo, spans[i].hi = lo + (n ? n : 1), spans[i].dev = dev;
	nspans++;
	pthread_mutex_unlock(&spanMu); }
static void spanRemove(uintptr_t lo) {
	pthread_mutex_lock(&spanMu);
	size_t i = spanFind(lo);
	if (i > 0 && spans[i - 1].lo == lo) { memmove(&spans[i - 1], &spans[i], (nspans - i) * sizeof *spans); nspans--; }
	pthread_mutex_unlock(&spanMu); }
/* fakeForeign is the device whose allocation p points into when that is not the calling
 * thread's current device, else -1. */
int fakeForeign(uintptr_t p) {
	int d = -1;
	pthread_mutex_lock(&spanMu);
	size_t i = spanFind(p);
	if (i > 0 && p < spans[i - 1].hi && spans[i - 1].dev >= 0 && spans[i - 1].dev != cur) d = spans[i - 1].dev;
	pthread_mutex_unlock(&spanMu);
	return d; }
#include "fakestreams.h"
int cuMemAlloc_v2(uintptr_t* p, size_t n) {
	size_t l = limit();
	if (l && __sync_add_and_fetch(&used[cur], n) > l) { __sync_fetch_and_sub(&used[cur], n); return 2; }
	char* m = calloc(1, 16 + (n ? n : 1));
	if (!m) { if (l) __sync_fetch_and_sub(&used[cur], n); return 2; }
	((size_t*)m)[0] = n; ((size_t*)m)[1] = (size_t)cur;
	if (!l) __sync_fetch_and_add(&used[cur], n);
	spanAdd((uintptr_t)(m + 16), n, cur);
	*p = (uintptr_t)(m + 16); return 0; }
int cuMemFree_v2(uintptr_t p) {
	if (!p) return 0;
	char* m = (char*)p - 16;
	freeWait(p);
	spanRemove(p);
	__sync_fetch_and_sub(&used[((size_t*)m)[1]], ((size_t*)m)[0]);
	free(m); return 0; }
int cuMemGetInfo_v2(size_t* f, size_t* t) { size_t u = used[cur], tot = total(); *f = u < tot ? tot - u : 0; *t = tot; return 0; }
/* fakeMemUsed is the bytes allocated on device d and not freed (tests' accounting). */
long fakeMemUsed(int d) { return d >= 0 && d < MAXDEV ? (long)used[d] : -1; }
int cuMemHostAlloc(void** p, size_t n, unsigned f) {
	*p = calloc(1, n ? n : 1);
	if (!*p) return 2;
	spanAdd((uintptr_t)*p, n, -1);
	return 0; }
int cuMemFreeHost(void* p) {
	if (!p) return 0;
	freeWait((uintptr_t)p);
	spanRemove((uintptr_t)p);
	free(p); return 0; }
int cuModuleLoadData(void** m, const void* img) {
	if (strstr((const char*)img, ".version") == NULL) return 218; /* CUDA_ERROR_INVALID_PTX */
	*m = strdup((const char*)img); return 0; }
int cuModuleUnload(void* m) { free(m); return 0; }
/* With $GP_FAKE_KERNELS naming the kernel emulator (emu.h), launches run on the CPU. */
typedef int (*emu_fn)(const char*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void**);
typedef int (*emu_has_fn)(const char*);
typedef const char* (*emu_access_fn)(const char*);
static emu_fn emu;
static emu_has_fn emuHas;
static emu_access_fn emuAccess;
static int emuFailed;
static pthread_once_t emuOnce = PTHREAD_ONCE_INIT;
/* Once per process, whichever thread comes first; the others wait, so that no launch runs
 * before the emulator is loaded (it would be counted and not run). */
static void emuLoadOnce(void) {
	const char* p = getenv("GP_FAKE_KERNELS");
	void* h = p && *p ? dlopen(p, RTLD_NOW | RTLD_LOCAL) : 0;
	if (p && *p && !h) { fprintf(stderr, "fakecuda: %s\n", dlerror()); emuFailed = 1; return; }
	if (h) { emu = (emu_fn)dlsym(h, "emu_launch"); emuHas = (emu_has_fn)dlsym(h, "emu_has"); emuAccess = (emu_access_fn)dlsym(h, "emu_access"); }
}
static void emuLoad(void) { pthread_once(&emuOnce, emuLoadOnce); }
int cuModuleGetFunction(void** f, void* m, const char* name) {
	char pat[512]; snprintf(pat, sizeof pat, ".entry %s(", name);
	if (strstr((const char*)m, pat) == NULL) {
		emuLoad();
		if (!emuHas || !emuHas(name)) return 500; /* CUDA_ERROR_NOT_FOUND */
	}
	*f = (void*)strdup(name); return 0; }
/* A launch copies its arguments (the caller's may be gone when the kernel runs) and runs
 * on its stream. Pointer arguments into live allocations are its accesses: read when the
 * kernel declares them const, else written. */
typedef struct launch { char name[64]; unsigned g[3], b[3], sh; int n; void* ptr[33]; uint64_t val[32]; } launch;
static int runLaunch(void* p) {
	launch* l = p;
	return emu ? emu(l->name, l->g[0], l->g[1], l->g[2], l->b[0], l->b[1], l->b[2], l->sh, l->ptr) : 0; }
static int launchOp(fstream* s, const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned sh, void** params) {
	launch* l = calloc(1, sizeof *l);
	if (!l) return 2;
	snprintf(l->name, sizeof l->name, "%s", name);
	l->g[0] = gx, l->g[1] = gy, l->g[2] = gz, l->b[0] = bx, l->b[1] = by, l->b[2] = bz, l->sh = sh;
	while (params[l->n]) {
		if (l->n == 32) { free(l); return 1; }
		l->val[l->n] = *(uint64_t*)params[l->n];
		l->ptr[l->n] = &l->val[l->n];
		l->n++;
	}
	if (seeded()) {
		const char* mode = emuAccess ? emuAccess(name) : 0;
		fakeAccess acc[32];
		int na = 0;
		for (int i = 0; i < l->n; i++) {
			char m = mode && (int)strlen(mode) > i ? mode[i] : 'w';
			if (m == 'r' || m == 'w') acc[na++] = (fakeAccess){(uintptr_t)l->val[i], 1, m == 'w', i};
		}
		char op[80];
		snprintf(op, sizeof op, "kernel %s", name);
		if (check(s, op, acc, na)) { free(l); return 999; }
	}
	return enqueue(s, name, runLaunch, l, free, 0, 0); }
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
	unsigned sh, void* st, void** params, void** extra) {
	if (!f || gx == 0 || bx == 0 || bx * by * bz > 1024 || !params) return 1;
	__sync_fetch_and_add(&launches, 1);
	/* The Go binding (driver.Context.Launch) ends kernelParams with NULL; each slot is 8 bytes.
	 * Only the kernel's pointer parameters are addresses: a value parameter's bits (a float's
	 * 0x3dcccccd) can fall inside a live allocation once the heap has grown that far, so with
	 * the emulator loaded its table says which slots to check; without it every slot is. */
	emuLoad();
	if (emuFailed) return 1;
	if (nspans) {
		const char* mode = emuAccess ? emuAccess((const char*)f) : 0;
		for (void** a = params; *a; a++) {
			int i = (int)(a - params);
			if (mode && ((int)strlen(mode) <= i || (mode[i] != 'r' && mode[i] != 'w'))) continue;
			int d = fakeForeign(*(uintptr_t*)*a);
			if (d >= 0) {
				fprintf(stderr, "fakecuda: kernel %s launched on device %d: argument %d points into device %d's memory (no peer access)\n",
					(const char*)f, cur, (int)(a - params), d);
				return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
			}
		}
	}
	return launchOp((fstream*)st, (const char*)f, gx, gy, gz, bx, by, bz, sh, params); }
long fakeLaunches(void) { return launches; }
int cuGetErrorString(int r, const char** s) {
	*s = r == 2 ? "out of memory" : r == 101 ? "invalid device ordinal" : r == 700 ? "an illegal memory access was encountered" : r == 218 ? "a PTX JIT compilation failed" : r == 500 ? "named symbol not found"
		: r == 600 ? "device not ready" : r == 719 ? "unspecified launch failure (fake: an asynchronous operation failed)"
		: r == 999 && myRace[0] ? myRace : "fake error";
	return 0; }
