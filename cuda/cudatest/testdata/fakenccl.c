/* A fake libnccl.so.2 for CPU tests, used with fakecuda.c (device memory is host memory).
 * Collectives and Send/Recv compute real results, between the ranks of one process (goroutines
 * on their own threads) and between ranks in different processes alike.
 *
 * How ranks meet. ncclGetUniqueId names a POSIX shared-memory segment: the id carries the
 * maker's pid, a per-process counter and a random nonce, and every rank derives the same name
 * from it (/dev/shm/gpfakenccl-<pid>-<counter>-<nonce>). ncclCommInitRank opens the segment,
 * creating it if it is the first (O_EXCL decides who; the creator sizes it for n ranks and
 * publishes a magic word last), claims its rank slot, records its pid and the process's start
 * time, and waits until all n ranks have joined. Every rank then unlinks the name, so that
 * nothing is left in /dev/shm whatever happens to the processes afterwards: the memory lives
 * while a rank still maps it. Ranks of one process map the segment separately, like ranks of
 * different processes; there is a single path.
 *
 * Collectives. Device pointers are valid only in their own process, so each rank copies its
 * send buffer into its own staging area of the segment (STAGE bytes per rank; larger buffers
 * go in rounds), all ranks meet at a barrier, each computes its own result from the staging
 * areas into its receive buffer, and all meet again before the areas are reused. In-place
 * calls (send == recv, or NCCL's in-place offsets for all-gather and reduce-scatter) are
 * safe. The first round also compares every rank's arguments (operation, count, type, op,
 * root) and fails all ranks with ncclInvalidUsage when they differ, where real NCCL would
 * hang or corrupt memory.
 *
 * Send/Recv. Each ordered pair of ranks has a byte ring in the segment (RING bytes, less for
 * large worlds); a message is its length then its bytes. A send returns once its bytes are in
 * the ring, so messages up to the ring's size are buffered; a longer one streams, blocking the
 * sender until the receiver drains it (as real NCCL blocks a send until its receive is
 * posted). A receive of another length than the message's consumes the message and fails
 * with ncclInvalidUsage.
 *
 * Waiting, abort and dead peers. All waits sleep on one futex word of the segment that every
 * change bumps (a short poll elsewhere than Linux). ncclCommAbort marks the segment aborted
 * and wakes every waiter, in every process; they, and all later calls on the communicator by
 * any rank, fail with ncclInternalError (3). A waiter checks every POLL_MS that the processes
 * of the other ranks are alive (/proc/<pid>/stat: present, not a zombie, same start time); a
 * dead one marks the segment with ncclRemoteError (6), which every rank then returns and
 * ncclCommGetAsyncError reports. ncclCommInitRank gives up with ncclSystemError (2) when not
 * every rank has joined within $GP_FAKE_NCCL_INIT_TIMEOUT seconds (default 120, fractions
 * allowed). A process killed while its ranks wait there leaves its segment in /dev/shm, the
 * only way one can be left; the next ncclGetUniqueId on the machine unlinks such segments
 * (maker gone, older than the init timeout).
 *
 * Streams. A call runs on its stream through fakecuda.c's fakeStreamOp: at once on a
 * synchronous stream (the default: calls complete before they return, and their errors are
 * their results), on the stream's thread when the fake driver runs streams asynchronously
 * ($GP_EMU_SEED; its checker then sees the buffers' bytes as the collective reads and writes
 * them). Arguments are checked at the call; a failure while the stream runs the call is
 * reported by ncclCommGetAsyncError, and the stream stays blocked until the communicator is
 * aborted, as behind a failed NCCL kernel. A call holds a
 * reference to the communicator until it has run. ncclGroupStart/End do nothing.
 * Data types: int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16
 * (the 16-bit floats reduce in float32); ops: sum, prod, max, min, avg (integer avg truncates). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#define MAXR 64
#define MAGIC 0x6e63636cu
#define STAGE ((size_t)1 << 20) /* staging bytes per rank and round */
#define RING ((size_t)1 << 20)  /* ring bytes per ordered pair, worlds up to 8 */
#define SMALLRING ((size_t)64 << 10)
#define POLL_MS 20

enum { ok = 0, sysErr = 2, internalErr = 3, invalidArg = 4, invalidUsage = 5, remoteErr = 6 };

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { _Atomic uint64_t head, tail; } ring_t;
typedef struct { int kind, dt, op, root; uint64_t count; } args_t;
typedef struct {
	_Atomic uint32_t magic, gen; /* gen: the futex word, bumped on every change */
	int n;
	_Atomic int joined, aborted, arrived, dead;
	_Atomic uint32_t bgen;
	_Atomic int claimed[MAXR], present[MAXR];
	int pid[MAXR];
	unsigned long long start[MAXR];
	args_t args[MAXR];
	ring_t ring[MAXR][MAXR];
} shdr;
typedef struct {
	shdr* h;
	size_t maplen, stage0, ring0, ringsz;
	int rank, n, aborted;
	_Atomic int refs; /* 1 for the handle, 1 per call in progress or queued */
	_Atomic int asyncErr; /* the first failure of a call run on a stream's thread */
	long long lastcheck;
} comm;

static _Atomic unsigned long idctr;
static char remoteMsg[160] = "remote process exited or there was a network error";

static size_t dtsize(int dt) { return dt <= 1 ? 1 : dt == 6 || dt == 9 ? 2 : dt == 4 || dt == 5 || dt == 8 ? 8 : 4; }
static size_t ringsz(int n) { return n <= 8 ? RING : SMALLRING; }
static size_t pagealign(size_t b) { return (b + 4095) & ~(size_t)4095; }
static size_t seglen(int n) { return pagealign(sizeof(shdr)) + (size_t)n * STAGE + (size_t)n * n * ringsz(n); }
static long long nowms(void) {
	struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000; }
static char* stage(comm* m, int r) { return (char*)m->h + m->stage0 + (size_t)r * STAGE; }
static char* ringdata(comm* m, int f, int t) { return (char*)m->h + m->ring0 + ((size_t)f * m->n + t) * m->ringsz; }

static void wake(shdr* h) {
	atomic_fetch_add(&h->gen, 1);
#ifdef __linux__
	syscall(SYS_futex, &h->gen, FUTEX_WAKE, INT_MAX, 0, 0, 0);
#endif
}
static void sleepon(shdr* h, uint32_t g) {
#ifdef __linux__
	struct timespec ts = {0, POLL_MS * 1000000L};
	syscall(SYS_futex, &h->gen, FUTEX_WAIT, g, &ts, 0, 0);
#else
	(void)g; struct timespec ts = {0, 100000L}; nanosleep(&ts, 0);
#endif
}

/* starttime reads field 22 of /proc/<pid>/stat and the state; 0 when the process is gone. */
static unsigned long long starttime(int pid, char* state) {
	char p[64], buf[1024];
	snprintf(p, sizeof p, "/proc/%d/stat", pid);
	int fd = open(p, O_RDONLY);
	if (fd < 0) return 0;
	ssize_t k = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (k <= 0) return 0;
	buf[k] = 0;
	char* q = strrchr(buf, ')');
	if (!q || q[1] != ' ') return 0;
	*state = q[2];
	q += 2;
	for (int f = 3; f < 22; f++) { q = strchr(q, ' '); if (!q) return 0; q++; }
	return strtoull(q, 0, 10);
}
static int alive(int pid, unsigned long long start) {
	if (start == 0) return kill(pid, 0) == 0 || errno == EPERM; /* no /proc */
	char st = 0;
	unsigned long long s = starttime(pid, &st);
	return s == start && st != 'Z' && st != 'X';
}
/* failed returns the segment's error, naming the dead rank in ncclGetErrorString's text for
 * a remote error (whichever process detected it). */
static int failed(shdr* h) {
	int a = atomic_load(&h->aborted), r = atomic_load(&h->dead);
	if (a == remoteErr)
		snprintf(remoteMsg, sizeof remoteMsg, "remote process exited or there was a network error "
			"(fake: rank %d, process %d, is gone)", r, h->pid[r]);
	return a;
}
/* peersDead marks the segment when another process's rank is gone; returns its code or 0. */
static int peersDead(comm* m) {
	shdr* h = m->h; int me = getpid();
	for (int r = 0; r < m->n; r++) {
		if (!atomic_load(&h->present[r]) || h->pid[r] == me || alive(h->pid[r], h->start[r])) continue;
		int z = 0;
		atomic_store(&h->dead, r); /* before the code, which readers check first */
		atomic_compare_exchange_strong(&h->aborted, &z, remoteErr);
		wake(h);
		return failed(h);
	}
	return 0;
}
/* waitfor sleeps until ready(m, arg); it returns 0, or the segment's error (aborted, a dead
 * peer), or sysErr at deadline (ms on CLOCK_MONOTONIC, 0 for none). */
static int waitfor(comm* m, int (*ready)(comm*, const void*), const void* arg, long long deadline) {
	shdr* h = m->h;
	for (;;) {
		uint32_t g = atomic_load(&h->gen);
		if (ready(m, arg)) return ok;
		if (atomic_load(&h->aborted)) return failed(h);
		int a;
		long long t = nowms();
		if (t - m->lastcheck >= POLL_MS) {
			m->lastcheck = t;
			if ((a = peersDead(m))) return a;
		}
		if (deadline && t >= deadline) return sysErr;
		sleepon(h, g);
	}
}

static int enter(comm* m) {
	int r = atomic_load(&m->refs);
	while (r > 0)
		if (atomic_compare_exchange_weak(&m->refs, &r, r + 1)) return 1;
	return 0;
}
/* leave drops a reference; the last unmaps the segment and frees a destroyed handle (an
 * aborted one stays allocated, a few bytes, so that a racing query fails instead of crashing). */
static void leave(comm* m) {
	if (atomic_fetch_sub(&m->refs, 1) != 1) return;
	munmap(m->h, m->maplen);
	if (!m->aborted) free(m);
}

static int joinedAll(comm* m, const void* a) { (void)a; return atomic_load(&m->h->joined) >= m->n; }
static int bgenMoved(comm* m, const void* a) { return atomic_load(&m->h->bgen) != *(const uint32_t*)a; }

static int barrier(comm* m) {
	shdr* h = m->h;
	uint32_t g = atomic_load(&h->bgen);
	if (atomic_fetch_add(&h->arrived, 1) + 1 == m->n) {
		atomic_store(&h->arrived, 0);
		atomic_fetch_add(&h->bgen, 1);
		wake(h);
		return failed(h);
	}
	return waitfor(m, bgenMoved, &g, 0);
}

static long long initTimeoutMs(void) {
	const char* s = getenv("GP_FAKE_NCCL_INIT_TIMEOUT");
	double v = s && *s ? strtod(s, 0) : 0;
	return v > 0 ? (long long)(v * 1000) : 120000;
}
/* sweep unlinks the segments that a job killed while its ranks were joining left behind:
 * those whose maker (the pid in the name) is gone and that are older than the init timeout,
 * so that no rank can still be about to join. */
static void sweep(void) {
#ifdef __linux__
	DIR* d = opendir("/dev/shm");
	if (!d) return;
	struct dirent* e;
	struct stat st;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	while ((e = readdir(d))) {
		int pid;
		char state = 0;
		if (sscanf(e->d_name, "gpfakenccl-%d-", &pid) != 1 || pid <= 0) continue;
		if (starttime(pid, &state) && state != 'Z' && state != 'X') continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
		long long age = (long long)(now.tv_sec - st.st_ctim.tv_sec) * 1000 + (now.tv_nsec - st.st_ctim.tv_nsec) / 1000000;
		if (age > initTimeoutMs()) unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
#endif
}

int ncclGetVersion(int* v) { *v = 22703; return ok; }
int ncclGetUniqueId(ncclUniqueId* id) {
	sweep();
	uint64_t k = atomic_fetch_add(&idctr, 1) + 1, nonce = 0;
	int fd = open("/dev/urandom", O_RDONLY);
	if (fd < 0 || read(fd, &nonce, sizeof nonce) != sizeof nonce) {
		struct timespec t; clock_gettime(CLOCK_REALTIME, &t);
		nonce = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 30) ^ (uint64_t)(uintptr_t)id;
	}
	if (fd >= 0) close(fd);
	uint32_t pid = (uint32_t)getpid();
	memset(id->internal, 0x5a, 128);
	memcpy(id->internal + 8, &pid, 4); memcpy(id->internal + 12, &k, 8); memcpy(id->internal + 20, &nonce, 8);
	return ok; }

static void segname(const ncclUniqueId* id, char* out, size_t len) {
	uint32_t pid; uint64_t k, nonce;
	memcpy(&pid, id->internal + 8, 4); memcpy(&k, id->internal + 12, 8); memcpy(&nonce, id->internal + 20, 8);
	snprintf(out, len, "gpfakenccl-%u-%llu-%016llx", pid, (unsigned long long)k, (unsigned long long)nonce);
}
static int shmopen(const char* name, int flags) {
#ifdef __linux__
	char p[128]; snprintf(p, sizeof p, "/dev/shm/%s", name);
	return open(p, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
#else
	char p[128]; snprintf(p, sizeof p, "/%s", name);
	return shm_open(p, flags, 0600);
#endif
}
static void shmunlink(const char* name) {
#ifdef __linux__
	char p[128]; snprintf(p, sizeof p, "/dev/shm/%s", name); unlink(p);
#else
	char p[128]; snprintf(p, sizeof p, "/%s", name); shm_unlink(p);
#endif
}
/* attach opens or creates the segment of name for n ranks and maps it. */
static int attach(comm* m, const char* name, int n, long long deadline) {
	size_t want = seglen(n);
	int fd = shmopen(name, O_RDWR | O_CREAT | O_EXCL), creator = fd >= 0;
	if (!creator && errno == EEXIST) fd = shmopen(name, O_RDWR);
	if (fd < 0) return sysErr;
	if (creator && ftruncate(fd, (off_t)want) != 0) { close(fd); shmunlink(name); return sysErr; }
	struct stat st;
	for (;;) { /* a joiner can open the file before its creator has sized it */
		if (fstat(fd, &st) != 0) { close(fd); return sysErr; }
		if (st.st_size > 0) break;
		if (nowms() >= deadline) { close(fd); return sysErr; }
		struct timespec ts = {0, 1000000L}; nanosleep(&ts, 0);
	}
	if ((size_t)st.st_size != want) { close(fd); return invalidArg; } /* another world size */
	void* p = mmap(0, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) { if (creator) shmunlink(name); return sysErr; }
	shdr* h = p;
	if (creator) { h->n = n; atomic_store(&h->magic, MAGIC); }
	while (atomic_load(&h->magic) != MAGIC) {
		if (nowms() >= deadline) { munmap(p, want); return sysErr; }
		struct timespec ts = {0, 1000000L}; nanosleep(&ts, 0);
	}
	if (h->n != n) { munmap(p, want); return invalidArg; }
	m->h = h; m->maplen = want; m->n = n;
	m->stage0 = pagealign(sizeof(shdr)); m->ringsz = ringsz(n); m->ring0 = m->stage0 + (size_t)n * STAGE;
	return ok;
}

int ncclCommInitRank(comm** out, int n, ncclUniqueId id, int rank) {
	if (!out || id.internal[0] != 0x5a || n < 1 || n > MAXR || rank < 0 || rank >= n) return invalidArg;
	char name[96];
	segname(&id, name, sizeof name);
	long long deadline = nowms() + initTimeoutMs();
	comm* m = calloc(1, sizeof *m);
	if (!m) return sysErr;
	int rc = attach(m, name, n, deadline);
	if (rc) { free(m); return rc; }
	shdr* h = m->h;
	m->rank = rank; atomic_store(&m->refs, 1);
	int z = 0;
	if (!atomic_compare_exchange_strong(&h->claimed[rank], &z, 1)) { leave(m); return invalidUsage; }
	char state;
	h->pid[rank] = getpid();
	h->start[rank] = starttime(getpid(), &state);
	atomic_store(&h->present[rank], 1);
	atomic_fetch_add(&h->joined, 1);
	wake(h);
	rc = waitfor(m, joinedAll, 0, deadline);
	shmunlink(name); /* every rank has it mapped, or the job failed: either way it may go */
	if (rc) {
		if (rc == sysErr) { int z2 = 0; atomic_compare_exchange_strong(&h->aborted, &z2, sysErr); wake(h); }
		leave(m);
		return rc;
	}
	*out = m;
	return ok; }
int ncclCommDestroy(comm* m) { if (!m) return invalidArg; leave(m); return ok; }
int ncclCommAbort(comm* m) {
	if (!m) return invalidArg;
	if (!enter(m)) return ok;
	int z = 0;
	atomic_compare_exchange_strong(&m->h->aborted, &z, internalErr);
	wake(m->h);
	m->aborted = 1;
	leave(m); /* this call's reference */
	leave(m); /* the handle's */
	return ok; }
int ncclCommGetAsyncError(comm* m, int* e) {
	if (!m || !e) return invalidArg;
	if (!enter(m)) { *e = internalErr; return ok; }
	*e = atomic_load(&m->asyncErr); /* this rank's own failure before a peer's abort */
	if (!*e) *e = failed(m->h);
	leave(m);
	return ok; }
int ncclCommCount(const comm* m, int* n) { *n = m->n; return ok; }
int ncclCommUserRank(const comm* m, int* r) { *r = m->rank; return ok; }

static uint16_t f2bf(float x) {
	uint32_t u; memcpy(&u, &x, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16); }
static float bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float x; memcpy(&x, &u, 4); return x; }
static float h2f(uint16_t h) {
	uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, f = h & 0x3ff, u;
	if (e == 0) {
		if (!f) u = s;
		else { e = 113; while (!(f & 0x400)) { f <<= 1; e--; } u = s | (e << 23) | ((f & 0x3ff) << 13); }
	} else if (e == 31) u = s | 0x7f800000u | (f << 13);
	else u = s | ((e + 112) << 23) | (f << 13);
	float x; memcpy(&x, &u, 4); return x; }
static uint16_t f2h(float x) {
	uint32_t u; memcpy(&u, &x, 4);
	uint32_t s = (u >> 16) & 0x8000u, f = u & 0x7fffff, be = (u >> 23) & 0xff;
	int e = (int)be - 127 + 15;
	if (be == 0xff) return (uint16_t)(s | 0x7c00 | (f ? 0x200 : 0));
	if (e >= 31) return (uint16_t)(s | 0x7c00);
	if (e <= 0) {
		if (e < -10) return (uint16_t)s;
		f |= 0x800000;
		int sh = 14 - e;
		uint32_t h = f >> sh, rem = f & ((1u << sh) - 1), half = 1u << (sh - 1);
		if (rem > half || (rem == half && (h & 1))) h++;
		return (uint16_t)(s | h);
	}
	uint32_t h = ((uint32_t)e << 10) | (f >> 13), rem = f & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
	return (uint16_t)(s | h); }

#define ID(x) (x)
#define REDUCE(T, A, LD, ST) do { \
	T* d = (T*)dst; \
	for (size_t i = 0; i < len; i++) { \
		A a = LD(((const T*)src[0])[i]); \
		for (int k = 1; k < n; k++) { \
			A b = LD(((const T*)src[k])[i]); \
			a = op == 1 ? a * b : op == 2 ? (b > a ? b : a) : op == 3 ? (b < a ? b : a) : a + b; \
		} \
		if (op == 4) a = a / (A)n; \
		d[i] = ST(a); \
	} } while (0)
/* reduce combines len elements at src[0..n) into dst in rank order. */
static void reduce(void* dst, const char* const* src, int n, size_t len, int dt, int op) {
	switch (dt) {
	case 0: REDUCE(int8_t, int64_t, ID, (int8_t)); break;
	case 1: REDUCE(uint8_t, uint64_t, ID, (uint8_t)); break;
	case 2: REDUCE(int32_t, int64_t, ID, (int32_t)); break;
	case 3: REDUCE(uint32_t, uint64_t, ID, (uint32_t)); break;
	case 4: REDUCE(int64_t, int64_t, ID, ID); break;
	case 5: REDUCE(uint64_t, uint64_t, ID, ID); break;
	case 6: REDUCE(uint16_t, float, h2f, f2h); break;
	case 7: REDUCE(float, float, ID, ID); break;
	case 8: REDUCE(double, double, ID, ID); break;
	case 9: REDUCE(uint16_t, float, bf2f, f2bf); break;
	}
}

static int mismatch(shdr* h, int n) {
	for (int k = 1; k < n; k++)
		if (memcmp(&h->args[k], &h->args[0], sizeof(args_t))) return 1;
	return 0;
}

/* kind: 0 all-reduce, 1 reduce-scatter, 2 all-gather, 3 broadcast. count is per the NCCL
 * call: elements of recv for reduce-scatter, of send for all-gather. */
static int coll(int kind, const void* s, void* r, size_t count, int dt, int op, int root, comm* m) {
	if (!m) return invalidArg;
	if (dt < 0 || dt > 9 || ((kind == 0 || kind == 1) && (op < 0 || op > 4))) return invalidArg;
	if (!enter(m)) return internalErr;
	shdr* h = m->h;
	int n = m->n, me = m->rank, rc = failed(h);
	if (rc) { leave(m); return rc; }
	if (kind == 3 && (root < 0 || root >= n)) { leave(m); return invalidArg; }
	args_t a = {kind, dt, kind <= 1 ? op : 0, kind == 3 ? root : 0, count};
	h->args[me] = a;
	size_t es = dtsize(dt), per = kind == 1 ? STAGE / (es * n) : STAGE / es, off = 0;
	const char* src[MAXR];
	do {
		size_t len = count - off < per ? count - off : per;
		char* mine = stage(m, me);
		if (kind == 1)
			for (int j = 0; j < n; j++) memcpy(mine + j * len * es, (const char*)s + (j * count + off) * es, len * es);
		else if (kind != 3 || me == root)
			memcpy(mine, (const char*)s + off * es, len * es);
		if ((rc = barrier(m))) break;
		int bad = off == 0 && mismatch(h, n);
		if (!bad) {
			for (int k = 0; k < n; k++) src[k] = stage(m, k) + (kind == 1 ? me * len * es : 0);
			if (kind == 3) memcpy((char*)r + off * es, src[root], len * es);
			else if (kind == 2) for (int k = 0; k < n; k++) memcpy((char*)r + (k * count + off) * es, src[k], len * es);
			else reduce((char*)r + off * es, src, n, len, dt, op);
		}
		if ((rc = barrier(m))) break;
		if (bad) { rc = invalidUsage; break; }
		off += len;
	} while (off < count);
	leave(m);
	return rc; }

/* A call as queued on its stream. kind: 0-3 as coll's, 4 send, 5 receive. */
typedef struct { int kind, dt, op, root; const void* s; void* r; size_t count; comm* m; int queued; } call_t;
typedef struct { uintptr_t p; size_t n; int write, arg; } fakeAccess;
typedef int (*streamop_fn)(void*, const char*, const fakeAccess*, int, int (*)(void*), void*, void (*)(void*));
static int sendNow(const void* s, size_t n, int dt, int peer, comm* m);
static int recvNow(void* r, size_t n, int dt, int peer, comm* m);
static int isAborted(comm* m, const void* a) { (void)a; return atomic_load(&m->h->aborted) != 0; }
static int runCall(void* p) {
	call_t* c = p;
	int rc = c->kind == 4 ? sendNow(c->s, c->count, c->dt, c->root, c->m)
		: c->kind == 5 ? recvNow(c->r, c->count, c->dt, c->root, c->m)
		: coll(c->kind, c->s, c->r, c->count, c->dt, c->op, c->root, c->m);
	int z = 0;
	if (!c->queued || !rc) return rc;
	/* As NCCL's kernels, a failed call holds its stream until the communicator is aborted;
	 * the failure is the communicator's (ncclCommGetAsyncError), not the stream's. */
	atomic_compare_exchange_strong(&c->m->asyncErr, &z, rc);
	waitfor(c->m, isAborted, 0, 0);
	return 0; }
static void releaseCall(void* p) { call_t* c = p; leave(c->m); free(c); }
/* submit checks a call's arguments and runs it on stream st (see Streams above). */
static int submit(void* st, call_t c) {
	static const char* names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclSend", "ncclRecv"};
	comm* m = c.m;
	if (!m || c.dt < 0 || c.dt > 9 || ((c.kind == 0 || c.kind == 1) && (c.op < 0 || c.op > 4))) return invalidArg;
	if (!enter(m)) return internalErr;
	int rc = failed(m->h);
	if (!rc && (c.kind == 3 || c.kind >= 4) && (c.root < 0 || c.root >= m->n || (c.kind >= 4 && c.root == m->rank))) rc = invalidArg;
	if (rc) { leave(m); return rc; }
	call_t* p = malloc(sizeof *p);
	if (!p) { leave(m); return sysErr; }
	*p = c;
	size_t b = c.count * dtsize(c.dt), in = c.kind == 1 ? b * m->n : b, out = c.kind == 2 ? b * m->n : b;
	fakeAccess acc[2] = {{(uintptr_t)c.s, c.kind == 5 || (c.kind == 3 && m->rank != c.root) ? 0 : in, 0, 0},
		{(uintptr_t)c.r, c.kind == 4 ? 0 : out, 1, 1}};
	static streamop_fn f;
	static int (*queues)(void*);
	static int tried;
	if (!tried) f = (streamop_fn)dlsym(RTLD_DEFAULT, "fakeStreamOp"), queues = (int (*)(void*))dlsym(RTLD_DEFAULT, "fakeStreamQueues"), tried = 1;
	if (!f) { rc = runCall(p); releaseCall(p); return rc; }
	p->queued = queues && queues(st);
	rc = f(st, names[c.kind], acc, 2, runCall, p, releaseCall);
	return rc == 999 ? invalidUsage : rc; /* the race is in fakecuda's fakeRaceText */ }
int ncclAllReduce(const void* s, void* r, size_t n, int dt, int op, comm* m, void* st) { return submit(st, (call_t){0, dt, op, 0, s, r, n, m}); }
int ncclReduceScatter(const void* s, void* r, size_t n, int dt, int op, comm* m, void* st) { return submit(st, (call_t){1, dt, op, 0, s, r, n, m}); }
int ncclAllGather(const void* s, void* r, size_t n, int dt, comm* m, void* st) { return submit(st, (call_t){2, dt, 0, 0, s, r, n, m}); }
int ncclBroadcast(const void* s, void* r, size_t n, int dt, int root, comm* m, void* st) { return submit(st, (call_t){3, dt, 0, root, s, r, n, m}); }

static int ringHasRoom(comm* m, const void* q) {
	const ring_t* g = q; return atomic_load(&g->head) - atomic_load(&g->tail) < m->ringsz; }
static int ringHasData(comm* m, const void* q) {
	const ring_t* g = q; return atomic_load(&g->head) != atomic_load(&g->tail); }
/* ringWrite streams b bytes to peer's ring, waiting for room. */
static int ringWrite(comm* m, int peer, const char* p, size_t b) {
	ring_t* q = &m->h->ring[m->rank][peer];
	char* d = ringdata(m, m->rank, peer);
	while (b) {
		int rc = waitfor(m, ringHasRoom, q, 0);
		if (rc) return rc;
		uint64_t hd = atomic_load(&q->head), tl = atomic_load(&q->tail);
		size_t o = hd % m->ringsz, k = m->ringsz - (size_t)(hd - tl);
		if (k > m->ringsz - o) k = m->ringsz - o;
		if (k > b) k = b;
		memcpy(d + o, p, k);
		atomic_store(&q->head, hd + k);
		wake(m->h);
		p += k; b -= k;
	}
	return ok;
}
/* ringRead takes b bytes from peer's ring into p (discarding them when p is NULL). */
static int ringRead(comm* m, int peer, char* p, size_t b) {
	ring_t* q = &m->h->ring[peer][m->rank];
	const char* d = ringdata(m, peer, m->rank);
	while (b) {
		int rc = waitfor(m, ringHasData, q, 0);
		if (rc) return rc;
		uint64_t hd = atomic_load(&q->head), tl = atomic_load(&q->tail);
		size_t o = tl % m->ringsz, k = (size_t)(hd - tl);
		if (k > m->ringsz - o) k = m->ringsz - o;
		if (k > b) k = b;
		if (p) { memcpy(p, d + o, k); p += k; }
		atomic_store(&q->tail, tl + k);
		wake(m->h);
		b -= k;
	}
	return ok;
}
static int p2pEnter(comm* m, int dt, int peer) {
	if (!m || dt < 0 || dt > 9) return invalidArg;
	if (!enter(m)) return internalErr;
	int rc = failed(m->h);
	if (!rc && (peer < 0 || peer >= m->n || peer == m->rank)) rc = invalidArg;
	if (rc) leave(m);
	return rc;
}
int ncclSend(const void* s, size_t n, int dt, int peer, comm* m, void* st) { return submit(st, (call_t){4, dt, 0, peer, s, 0, n, m}); }
int ncclRecv(void* r, size_t n, int dt, int peer, comm* m, void* st) { return submit(st, (call_t){5, dt, 0, peer, 0, r, n, m}); }
static int sendNow(const void* s, size_t n, int dt, int peer, comm* m) {
	int rc = p2pEnter(m, dt, peer);
	if (rc) return rc;
	uint64_t b = n * dtsize(dt);
	rc = ringWrite(m, peer, (const char*)&b, sizeof b);
	if (!rc) rc = ringWrite(m, peer, s, b);
	leave(m);
	return rc; }
static int recvNow(void* r, size_t n, int dt, int peer, comm* m) {
	int rc = p2pEnter(m, dt, peer);
	if (rc) return rc;
	uint64_t b = 0, want = n * dtsize(dt);
	rc = ringRead(m, peer, (char*)&b, sizeof b);
	if (!rc) rc = ringRead(m, peer, b == want ? r : 0, b);
	if (!rc && b != want) rc = invalidUsage;
	leave(m);
	return rc; }
int ncclGroupStart(void) { return ok; }
int ncclGroupEnd(void) { return ok; }
const char* ncclGetErrorString(int r) {
	return r == sysErr ? "unhandled system error (fake: not every rank joined the communicator in time)"
		: r == internalErr ? "internal error (fake: communicator aborted)" : r == invalidArg ? "invalid argument"
		: r == invalidUsage ? "invalid usage" : r == remoteErr ? remoteMsg : "unhandled error"; }
