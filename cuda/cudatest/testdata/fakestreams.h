/* Asynchronous streams and the stream-order checker of the fake libcuda (included by
 * fakecuda.c after its table of live allocations, spans).
 *
 * Off (GP_EMU_SEED unset or empty) every operation runs when it is called, as it always
 * has. While GP_EMU_SEED is set, each stream runs its work on its own thread, in order,
 * sleeping a random while before some operations (the generator is seeded with GP_EMU_SEED
 * and the stream's number; GP_EMU_DELAY_US, default 200, bounds a sleep); a stream follows
 * the variable at each operation, so one created before it was set queues too, and one
 * whose seed is unset drains and runs at the call again. An event is a position in its
 * stream's queue; cuStreamWaitEvent queues a wait for that position; the host's
 * synchronisations (streams, events, the context, copies to pageable memory, frees) block
 * until the work has run.
 *
 * The checker runs while GP_EMU_SEED is set. It orders operations with vector clocks, one
 * timeline per stream and one for the host (synchronous copies, and everything any host
 * thread has waited for): enqueueing on a stream orders the operation after the host's
 * knowledge, an event carries its stream's clock to the streams that wait for it and to the
 * host that synchronises on it. Every live allocation (device memory, pinned host memory)
 * keeps the recent accesses to it: byte range, reading or writing, timeline and clock, and
 * what did it. An operation that reads bytes another timeline may still be writing, or writes
 * bytes another timeline may still be reading or writing, is a race: the first is kept
 * (fakeRaceText returns it), the op fails with CUDA_ERROR_UNKNOWN, whose cuGetErrorString is
 * the race, and it is printed on standard error (and, when GP_EMU_REPORT names a file, appended
 * to it, so that a test learns the verdict of the processes it started). Each decision depends only on the order of
 * the calls, not on the delays, so a race is reported whatever the seed; one host timeline
 * for all threads means a wait by one goroutine orders the work of all (no false race from
 * a channel the fake cannot see, and a race hidden when another goroutine happened to wait).
 *
 * Ranges: copies, memsets, NCCL, cuBLAS and cuDNN know the bytes they touch; a kernel
 * argument is taken to touch its first byte only (the emulator's generated table says which
 * pointer arguments are const, read, and which are written), which catches two streams using
 * the same tensor or a kernel inside a range a copy or collective is moving. */
#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define MAXT 4096  /* timelines: 0 is the host, then streams (numbers are reused after a destroy) */
#define MAXREC 64  /* accesses remembered per allocation */

typedef struct fakeAccess { uintptr_t p; size_t n; int write; int arg; } fakeAccess;
typedef struct work {
	struct work* next;
	int (*fn)(void*);
	void* arg;
	void (*release)(void*);
	struct fstream* waitOn; /* a queued stream wait: until waitOn->done >= waitPos */
	uint64_t waitPos;
	char name[64];
} work;
typedef struct fstream {
	int id, dev, async, started, quit, held;
	pthread_t th;
	work *head, *tail;
	uint64_t enq, done, rng;
	int err;
	char errName[64];
	uint32_t* vc;
} fstream;
typedef struct fevent { fstream* s; uint64_t pos; uint32_t* vc; } fevent;
typedef struct rec { uintptr_t lo, hi; int tl, write; uint32_t clk; char what[96]; } rec;
typedef struct hist { uintptr_t lo; rec* r; int n; struct hist* next; } hist;

static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER; /* queues and counters */
static pthread_cond_t qcv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t ckmu = PTHREAD_MUTEX_INITIALIZER; /* the checker's clocks and histories */
static fstream* streams[MAXT];
static int freeIds[MAXT], nfree, nextId = 1, maxId;
static uint32_t tick[MAXT], hostvc[MAXT];
static char raceText[1024];
static __thread char myRace[1024]; /* this thread's last race, for cuGetErrorString */
static int raced;
static long queuedRun; /* operations run on a stream's thread */
static int nAsync;     /* streams queueing now */

/* The seed: read from the environment once (a process started with it, such as a rank of a
 * test's job), then set by fakeSetSeed (a test in this process: Go's setenv may move the
 * environment under a concurrent getenv, so the hot path never reads it). */
static int seedOn = -1;
static uint64_t seedVal;
static unsigned delayUs = 200;
static char reportPath[512]; /* GP_EMU_REPORT, read with the seed */
static void seedInit(void) {
	const char* v = getenv("GP_EMU_SEED");
	const char* d = getenv("GP_EMU_DELAY_US");
	const char* r = getenv("GP_EMU_REPORT");
	if (d && *d) delayUs = (unsigned)atoi(d);
	if (r) snprintf(reportPath, sizeof reportPath, "%s", r);
	seedVal = v && *v ? strtoull(v, 0, 10) : 0;
	__atomic_store_n(&seedOn, v && *v ? 1 : 0, __ATOMIC_RELEASE); }
static int seeded(void) {
	int v = __atomic_load_n(&seedOn, __ATOMIC_ACQUIRE);
	if (v < 0) { seedInit(); v = seedOn; }
	return v; }
static uint64_t seedOf(void) { seeded(); return seedVal; }
static unsigned maxDelay(void) { seeded(); return delayUs; }
/* fakeSetSeed turns asynchronous streams on (with seed and a bound of delayUs microseconds
 * per delay) or off; fakeSeeded reports it (the emulator's block threads follow it). */
void fakeSetSeed(int on, unsigned long long seed, unsigned delay) {
	seeded();
	seedVal = seed, delayUs = delay;
	__atomic_store_n(&seedOn, on ? 1 : 0, __ATOMIC_RELEASE); }
int fakeSeeded(void) { return seeded(); }

/* fakeRaceText returns the first race the checker found ("" if none); reset clears it. */
const char* fakeRaceText(int reset) {
	if (reset) { pthread_mutex_lock(&ckmu); raced = 0; raceText[0] = 0; pthread_mutex_unlock(&ckmu); }
	return raceText; }

/* reportLine appends "kind pid N: text" to the GP_EMU_REPORT file, if the process has one: the
 * first race it records and when its streams first run asynchronously. */
static void reportLine(const char* kind, const char* text) {
	if (!reportPath[0]) return;
	char line[1200];
	int n = snprintf(line, sizeof line, "%s pid %d: %s\n", kind, (int)getpid(), text);
	if (n < 0) return;
	if (n >= (int)sizeof line) n = sizeof line - 1, line[n - 1] = '\n';
	int fd = open(reportPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) return;
	if (write(fd, line, (size_t)n) < 0) { /* nothing to do: the race is on standard error too */ }
	close(fd); }

static void join(uint32_t* dst, const uint32_t* src) {
	for (int i = 0; i <= maxId; i++) if (src[i] > dst[i]) dst[i] = src[i]; }

/* The allocation histories, by allocation start, in a small hash table. */
#define NHIST 4096
static hist* hists[NHIST];
static hist** histSlot(uintptr_t lo) {
	hist** h = &hists[(lo >> 4) % NHIST];
	while (*h && (*h)->lo != lo) h = &(*h)->next;
	return h; }
static void histDrop(uintptr_t lo) {
	pthread_mutex_lock(&ckmu);
	hist** h = histSlot(lo);
	if (*h) { hist* x = *h; *h = x->next; free(x->r); free(x); }
	pthread_mutex_unlock(&ckmu); }
static void tlName(int tl, char* b, size_t n) {
	if (tl == 0) snprintf(b, n, "the host");
	else snprintf(b, n, "stream %d (device %d)", tl, streams[tl] ? streams[tl]->dev : -1); }

/* checkAccess checks one access by timeline tl at clock vc, then remembers it; ckmu held.
 * It returns 1 for a race. */
static int checkAccess(int tl, const uint32_t* vc, const char* op, const fakeAccess* a, int report) {
	if (!a->p || !a->n) return 0;
	uintptr_t lo = 0, hi = 0;
	int dev = 0;
	pthread_mutex_lock(&spanMu);
	size_t i = spanFind(a->p);
	if (i > 0 && a->p < spans[i - 1].hi) lo = spans[i - 1].lo, hi = spans[i - 1].hi, dev = spans[i - 1].dev;
	pthread_mutex_unlock(&spanMu);
	if (!lo) return 0;
	hist** slot = histSlot(lo);
	if (!*slot) { *slot = calloc(1, sizeof(hist)); if (!*slot) return 0; (*slot)->lo = lo; (*slot)->r = calloc(MAXREC, sizeof(rec)); }
	hist* h = *slot;
	uintptr_t alo = a->p, ahi = a->p + a->n;
	char what[96];
	if (a->arg >= 0) snprintf(what, sizeof what, "%s (argument %d)", op, a->arg);
	else snprintf(what, sizeof what, "%s", op);
	int k = 0;
	for (int j = 0; j < h->n; j++) { /* forget what the host has seen complete: all later work is ordered after it */
		rec* r = &h->r[j];
		if (hostvc[r->tl] >= r->clk) continue;
		if (report && r->lo < ahi && alo < r->hi && (r->write || a->write) && r->tl != tl && vc[r->tl] < r->clk) {
			char t1[48], t2[48];
			tlName(tl, t1, sizeof t1), tlName(r->tl, t2, sizeof t2);
			snprintf(myRace, sizeof myRace,
				"fake: stream-order race: %s on %s %s bytes [%#lx, %#lx) of the %zu-byte %s buffer at %#lx "
				"while %s on %s may still be %s them (no event orders the two)",
				what, t1, a->write ? "writes" : "reads", (unsigned long)alo, (unsigned long)ahi, (size_t)(hi - lo),
				dev < 0 ? "pinned host" : "device", (unsigned long)lo, r->what, t2, r->write ? "writing" : "reading");
			if (!raced) memcpy(raceText, myRace, sizeof raceText), raced = 1, reportLine("race", myRace);
			fprintf(stderr, "%s\n", myRace);
			h->n = k + (h->n - j);
			memmove(&h->r[k], r, (size_t)(h->n - k) * sizeof(rec));
			return 1;
		}
		/* a covered access this one is ordered after is superseded: a write supersedes all,
		 * a read the reads of its own timeline */
		if (alo <= r->lo && r->hi <= ahi && (a->write || (!r->write && r->tl == tl))) continue;
		h->r[k++] = *r;
	}
	h->n = k;
	if (h->n == MAXREC) { memmove(&h->r[0], &h->r[1], (MAXREC - 1) * sizeof(rec)); h->n--; }
	rec* r = &h->r[h->n++];
	r->lo = alo, r->hi = ahi, r->tl = tl, r->write = a->write, r->clk = vc[tl];
	snprintf(r->what, sizeof r->what, "%s", what);
	return 0; }

/* check orders a new operation on stream s (NULL: the host) and checks its accesses;
 * it returns 1 for a race. */
static int check(fstream* s, const char* op, const fakeAccess* acc, int nacc) {
	int report = seeded();
	if (!report && !nAsync) return 0; /* accesses are remembered while a stream queues, for frees */
	pthread_mutex_lock(&ckmu);
	int tl = s ? s->id : 0;
	uint32_t* vc = s ? s->vc : hostvc;
	if (s) join(vc, hostvc);
	vc[tl] = ++tick[tl];
	int bad = 0;
	for (int i = 0; i < nacc && !bad; i++) bad = checkAccess(tl, vc, op, &acc[i], report);
	pthread_mutex_unlock(&ckmu);
	return bad; }
/* hostSees joins a timeline's clock (or an event's) into the host's after a synchronisation. */
static void hostSees(const uint32_t* vc) {
	if (!vc) return;
	pthread_mutex_lock(&ckmu);
	join(hostvc, vc);
	pthread_mutex_unlock(&ckmu); }

static uint64_t nextRand(fstream* s) {
	s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
	return s->rng; }
static void delay(fstream* s) {
	uint64_t r = nextRand(s);
	unsigned m = maxDelay();
	if (m && r % 4 == 0) { struct timespec ts = {0, (long)((r >> 8) % m) * 1000}; nanosleep(&ts, 0); }
	else if (r % 4 == 1) sched_yield(); }

static void* worker(void* p) {
	fstream* s = p;
	pthread_mutex_lock(&qmu);
	for (;;) {
		while ((!s->head || s->held) && !s->quit) pthread_cond_wait(&qcv, &qmu);
		if (!s->head) break;
		work* w = s->head;
		while (w->waitOn && w->waitOn->done < w->waitPos) pthread_cond_wait(&qcv, &qmu);
		pthread_mutex_unlock(&qmu);
		int rc = 0;
		if (w->fn) { delay(s); rc = w->fn(w->arg); }
		if (w->release) w->release(w->arg);
		pthread_mutex_lock(&qmu);
		if (rc && !s->err) s->err = rc, snprintf(s->errName, sizeof s->errName, "%s", w->name);
		s->head = w->next;
		if (!s->head) s->tail = 0;
		s->done++;
		if (w->fn) queuedRun++;
		free(w);
		pthread_cond_broadcast(&qcv);
	}
	pthread_mutex_unlock(&qmu);
	return 0; }

static int drain(fstream* s);

/* follow makes s follow GP_EMU_SEED before an operation: it starts queueing on its own
 * thread when the seed is set (whenever it was created) and, drained, runs work at the call
 * again when the seed is unset. */
static void follow(fstream* s) {
	if (!s || s->quit) return;
	int want = seeded();
	if (want == s->async) return;
	if (want) {
		pthread_mutex_lock(&qmu);
		if (!s->async) {
			s->rng = (seedOf() + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)s->id * 0xbf58476d1ce4e5b9ull;
			if (!s->rng) s->rng = 1;
			if (!s->started && pthread_create(&s->th, 0, worker, s) == 0) s->started = 1;
			if (s->started) s->async = 1, nAsync++;
			static int reported;
			if (s->started && !reported) {
				char seed[32];
				snprintf(seed, sizeof seed, "seed %llu", (unsigned long long)seedOf());
				reportLine("async", seed), reported = 1;
			}
		}
		pthread_mutex_unlock(&qmu);
		return;
	}
	drain(s);
	pthread_mutex_lock(&qmu);
	if (s->async) s->async = 0, nAsync--;
	pthread_mutex_unlock(&qmu); }

/* enqueue runs fn(arg) on s (at once when s is synchronous or NULL) and then release(arg).
 * It returns fn's result when it ran at once, else 0. */
static int enqueue(fstream* s, const char* name, int (*fn)(void*), void* arg, void (*release)(void*), fstream* waitOn, uint64_t waitPos) {
	follow(s);
	if (!s || !s->async) {
		if (waitOn && waitOn != s) { /* a synchronous stream waiting for an asynchronous one blocks its caller */
			pthread_mutex_lock(&qmu);
			while (waitOn->done < waitPos) pthread_cond_wait(&qcv, &qmu);
			pthread_mutex_unlock(&qmu);
		}
		int rc = fn ? fn(arg) : 0;
		if (release) release(arg);
		if (s) { pthread_mutex_lock(&qmu); s->enq++, s->done++; pthread_mutex_unlock(&qmu); }
		return rc;
	}
	work* w = calloc(1, sizeof *w);
	if (!w) { if (release) release(arg); return 2; }
	w->fn = fn, w->arg = arg, w->release = release, w->waitOn = waitOn, w->waitPos = waitPos;
	snprintf(w->name, sizeof w->name, "%s", name);
	pthread_mutex_lock(&qmu);
	if (s->tail) s->tail->next = w; else s->head = w;
	s->tail = w;
	s->enq++;
	pthread_cond_broadcast(&qcv);
	pthread_mutex_unlock(&qmu);
	return 0; }

/* drain blocks until s has run everything enqueued so far; it returns and clears the first
 * failure of an operation that ran on s's thread. */
static int drain(fstream* s) {
	if (!s) return 0;
	pthread_mutex_lock(&qmu);
	uint64_t pos = s->enq;
	while (s->done < pos) pthread_cond_wait(&qcv, &qmu);
	int rc = s->err;
	if (rc) fprintf(stderr, "fakecuda: %s on stream %d failed (%d)\n", s->errName, s->id, rc);
	s->err = 0;
	pthread_mutex_unlock(&qmu);
	if (s->vc) hostSees(s->vc);
	return rc ? 719 : 0; /* CUDA_ERROR_LAUNCH_FAILED */ }

/* fakeStreamOp is how the other fake libraries enqueue: it checks the accesses of op on
 * stream st and runs fn(arg) there, then release(arg). It returns 999 for a race (fn does
 * not run), fn's result when the stream is synchronous, else 0 (a later failure is the
 * stream's, reported by its next synchronisation). */
int fakeStreamOp(void* st, const char* op, const fakeAccess* acc, int nacc, int (*fn)(void*), void* arg, void (*release)(void*)) {
	if (check((fstream*)st, op, acc, nacc)) { if (release) release(arg); return 999; }
	return enqueue((fstream*)st, op, fn, arg, release, 0, 0); }

/* fakeQueuedOps counts the operations that ran on a stream's own thread. */
long fakeQueuedOps(void) { pthread_mutex_lock(&qmu); long n = queuedRun; pthread_mutex_unlock(&qmu); return n; }

/* fakeStreamHold stops (hold 1) or resumes (hold 0) an asynchronous stream's thread before
 * its next operation, so that a test can keep work pending while the host goes on; 1 when
 * st is not asynchronous. */
int fakeStreamHold(void* st, int hold) {
	fstream* s = st;
	follow(s);
	if (!s || !s->async) return 1;
	pthread_mutex_lock(&qmu);
	s->held = hold;
	pthread_cond_broadcast(&qcv);
	pthread_mutex_unlock(&qmu);
	return 0; }

/* fakeStreamQueues reports whether work on st runs on its own thread (not at the call). */
int fakeStreamQueues(void* st) { follow((fstream*)st); return st && ((fstream*)st)->async; }

/* freeWait drains the streams that may still use the allocation at lo, then forgets its
 * history (cuMemFree, cuMemFreeHost). CUDA's frees synchronise the whole device, which can
 * deadlock against an NCCL kernel in flight on another stream; the fake waits only for the
 * allocation's users, because the ranks of one test process share a fake device where each
 * would have its own GPU. */
static void freeWait(uintptr_t lo) {
	int tls[MAXREC], n = 0;
	pthread_mutex_lock(&ckmu);
	hist** h = histSlot(lo);
	for (int j = 0; *h && j < (*h)->n; j++) {
		rec* r = &(*h)->r[j];
		int seen = r->tl == 0 || hostvc[r->tl] >= r->clk;
		for (int k = 0; k < n && !seen; k++) seen = tls[k] == r->tl;
		if (!seen) tls[n++] = r->tl;
	}
	pthread_mutex_unlock(&ckmu);
	for (int k = 0; k < n; k++)
		if (streams[tls[k]] && !streams[tls[k]]->quit) drain(streams[tls[k]]);
	histDrop(lo); }

/* devSync drains every stream of the current device (cuCtxSynchronize). */
static int devSync(void) {
	int rc = 0;
	for (int i = 1; i <= maxId; i++) {
		fstream* s = streams[i];
		if (s && !s->quit && s->dev == cur) { int r = drain(s); if (r && !rc) rc = r; }
	}
	return rc; }

int cuStreamCreate(void** out, unsigned f) {
	pthread_mutex_lock(&ckmu);
	int id = nfree ? freeIds[--nfree] : nextId < MAXT ? nextId++ : 0;
	pthread_mutex_unlock(&ckmu);
	if (!id) return 2;
	fstream* s = streams[id];
	if (!s) {
		s = calloc(1, sizeof *s);
		if (!s || !(s->vc = calloc(MAXT, sizeof(uint32_t)))) { free(s); return 2; }
		s->id = id;
	}
	s->dev = cur, s->quit = 0, s->held = 0, s->async = 0, s->started = 0, s->head = s->tail = 0;
	pthread_mutex_lock(&ckmu);
	streams[id] = s;
	if (id > maxId) maxId = id;
	pthread_mutex_unlock(&ckmu);
	follow(s);
	*out = s; return 0; }
int cuStreamDestroy_v2(void* p) {
	fstream* s = p;
	if (!s) return 1;
	drain(s);
	pthread_mutex_lock(&qmu);
	s->quit = 1;
	if (s->async) s->async = 0, nAsync--;
	pthread_cond_broadcast(&qcv);
	pthread_mutex_unlock(&qmu);
	if (s->started) pthread_join(s->th, 0), s->started = 0;
	pthread_mutex_lock(&ckmu);
	freeIds[nfree++] = s->id; /* the struct stays: events may still name it */
	pthread_mutex_unlock(&ckmu);
	return 0; }
int cuStreamSynchronize(void* s) { return drain((fstream*)s); }
int cuStreamQuery(void* p) {
	fstream* s = p;
	if (!s) return 0;
	pthread_mutex_lock(&qmu);
	int idle = s->done >= s->enq;
	pthread_mutex_unlock(&qmu);
	if (!idle) return 600; /* CUDA_ERROR_NOT_READY */
	return drain(s); }
int cuEventCreate(void** e, unsigned f) {
	fevent* v = calloc(1, sizeof *v);
	if (!v || !(v->vc = calloc(MAXT, sizeof(uint32_t)))) { free(v); return 2; }
	*e = v; return 0; }
int cuEventDestroy_v2(void* e) { if (e) free(((fevent*)e)->vc); free(e); return 0; }
int cuEventRecord(void* e, void* st) {
	fevent* v = e;
	fstream* s = st;
	if (!v) return 400;
	pthread_mutex_lock(&qmu);
	v->s = s, v->pos = s ? s->enq : 0;
	pthread_mutex_unlock(&qmu);
	pthread_mutex_lock(&ckmu);
	if (s) { join(s->vc, hostvc); memcpy(v->vc, s->vc, sizeof(uint32_t) * (maxId + 1)); }
	else memcpy(v->vc, hostvc, sizeof(uint32_t) * (maxId + 1));
	pthread_mutex_unlock(&ckmu);
	return 0; }
static int eventDone(fevent* v) { return !v->s || v->s->done >= v->pos; }
int cuEventQuery(void* e) {
	fevent* v = e;
	pthread_mutex_lock(&qmu);
	int d = eventDone(v);
	pthread_mutex_unlock(&qmu);
	if (!d) return 600;
	hostSees(v->vc);
	return 0; }
int cuEventSynchronize(void* e) {
	fevent* v = e;
	pthread_mutex_lock(&qmu);
	while (!eventDone(v)) pthread_cond_wait(&qcv, &qmu);
	pthread_mutex_unlock(&qmu);
	hostSees(v->vc);
	return 0; }
int cuStreamWaitEvent(void* st, void* e, unsigned f) {
	fstream* s = st;
	fevent* v = e;
	if (!v) return 400;
	pthread_mutex_lock(&ckmu);
	if (s) join(s->vc, v->vc);
	else join(hostvc, v->vc);
	pthread_mutex_unlock(&ckmu);
	if (!v->s || v->s == s) return 0;
	return enqueue(s, "cuStreamWaitEvent", 0, 0, 0, v->s, v->pos); }
int cuCtxSynchronize(void) { return devSync(); }
int cuEventElapsedTime(float* ms, void* a, void* b) { *ms = 1.5f; return 0; }

/* Copies. An asynchronous copy from or to pinned memory (a span of cuMemHostAlloc) touches
 * that memory when it runs; one from pageable memory reads it at the call (CUDA stages it);
 * one to pageable memory returns when it has run, as CUDA's. */
typedef struct cpy { void* d; const void* s; size_t n; unsigned v; int set; void* own; } cpy;
static int runCopy(void* p) {
	cpy* c = p;
	if (c->set) for (size_t i = 0; i < c->n; i++) ((unsigned*)c->d)[i] = c->v;
	else memmove(c->d, c->s, c->n);
	return 0; }
static void freeCopy(void* p) { cpy* c = p; free(c->own); free(c); }
static int pinned(const void* p) {
	pthread_mutex_lock(&spanMu);
	size_t i = spanFind((uintptr_t)p);
	int r = i > 0 && (uintptr_t)p < spans[i - 1].hi && spans[i - 1].dev < 0;
	pthread_mutex_unlock(&spanMu);
	return r; }
static int copyOp(fstream* s, const char* op, void* d, const void* src, size_t n, unsigned v, int set, int wait, int fromHost) {
	follow(s);
	fakeAccess acc[2] = {{(uintptr_t)d, set ? n * 4 : n, 1, -1}, {(uintptr_t)src, set ? 0 : n, 0, -1}};
	if (check(s, op, acc, 2)) return 999;
	cpy* c = calloc(1, sizeof *c);
	if (!c) return 2;
	c->d = d, c->s = src, c->n = n, c->v = v, c->set = set;
	if (fromHost && s && s->async && !pinned(src)) { /* stage pageable memory now */
		if (!(c->own = malloc(n ? n : 1))) { free(c); return 2; }
		memcpy(c->own, src, n);
		c->s = c->own;
	}
	int rc = enqueue(s, op, runCopy, c, freeCopy, 0, 0);
	if (!rc && wait && s && s->async) rc = drain(s);
	return rc; }
/* A synchronous copy is the host's: it runs now, checked on the host's timeline. */
static int syncCopy(const char* op, void* d, const void* s, size_t n) {
	fakeAccess acc[2] = {{(uintptr_t)d, n, 1, -1}, {(uintptr_t)s, n, 0, -1}};
	if (check(0, op, acc, 2)) return 999;
	memmove(d, s, n);
	return 0; }
int cuMemcpyPeer(uintptr_t d, void* dc, uintptr_t s, void* sc, size_t n) { return syncCopy("cuMemcpyPeer", (void*)d, (void*)s, n); }
int cuMemcpyHtoD_v2(uintptr_t d, const void* s, size_t n) { return syncCopy("cuMemcpyHtoD", (void*)d, s, n); }
int cuMemcpyDtoH_v2(void* d, uintptr_t s, size_t n) { return syncCopy("cuMemcpyDtoH", d, (void*)s, n); }
int cuMemcpyDtoD_v2(uintptr_t d, uintptr_t s, size_t n) { return syncCopy("cuMemcpyDtoD", (void*)d, (void*)s, n); }
int cuMemcpyPeerAsync(uintptr_t d, void* dc, uintptr_t s, void* sc, size_t n, void* st) {
	return copyOp(st, "cuMemcpyPeerAsync", (void*)d, (void*)s, n, 0, 0, 0, 0); }
int cuMemcpyHtoDAsync_v2(uintptr_t d, const void* s, size_t n, void* st) { return copyOp(st, "cuMemcpyHtoDAsync", (void*)d, s, n, 0, 0, 0, 1); }
int cuMemcpyDtoHAsync_v2(void* d, uintptr_t s, size_t n, void* st) {
	return copyOp(st, "cuMemcpyDtoHAsync", d, (void*)s, n, 0, 0, !pinned(d), 0); }
int cuMemcpyDtoDAsync_v2(uintptr_t d, uintptr_t s, size_t n, void* st) { return copyOp(st, "cuMemcpyDtoDAsync", (void*)d, (void*)s, n, 0, 0, 0, 0); }
int cuMemsetD32Async(uintptr_t d, unsigned v, size_t n, void* st) { return copyOp(st, "cuMemsetD32Async", (void*)d, 0, n, v, 1, 0, 0); }
