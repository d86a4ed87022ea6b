/* A fake libnccl.so.2 for CPU tests, used with fakecuda.c (device memory is host memory).
 * Ranks of one process (goroutines on their own threads) meet in a clique keyed by the unique
 * id; a collective blocks until every rank has called it, then reduces on the host, so the
 * results are real. Send/Recv are buffered. ncclCommAbort wakes every waiting rank with an
 * error. Data types: int32, int64, float32, float64; ops: sum, prod, max, min, avg. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define MAXR 64
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct msg { struct msg* next; size_t bytes; char data[]; } msg;
typedef struct clique {
	struct clique* next; char id[128]; int n, joined, arrived, gen, aborted;
	pthread_mutex_t mu; pthread_cond_t cv;
	const void* send[MAXR]; size_t count; int dt, op, root;
	msg* box[MAXR][MAXR];
} clique;
typedef struct { clique* c; int rank; } comm;
static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;
static clique* cliques;
static unsigned long idctr;

static size_t dtsize(int dt) { return dt == 4 || dt == 5 || dt == 8 ? 8 : dt <= 1 ? 1 : dt == 6 || dt == 9 ? 2 : 4; }
static double get(const void* p, int dt, size_t i) {
	switch (dt) { case 2: return ((const int32_t*)p)[i]; case 4: return (double)((const int64_t*)p)[i];
	case 8: return ((const double*)p)[i]; default: return ((const float*)p)[i]; } }
static void put(void* p, int dt, size_t i, double v) {
	switch (dt) { case 2: ((int32_t*)p)[i] = (int32_t)v; break; case 4: ((int64_t*)p)[i] = (int64_t)v; break;
	case 8: ((double*)p)[i] = v; break; default: ((float*)p)[i] = (float)v; } }
/* wait for all ranks; returns 3 (ncclInternalError) when aborted. Caller holds c->mu. */
static int barrier(clique* c) {
	int g = c->gen;
	if (++c->arrived == c->n) { c->arrived = 0; c->gen++; pthread_cond_broadcast(&c->cv); }
	else while (g == c->gen && !c->aborted) pthread_cond_wait(&c->cv, &c->mu);
	return c->aborted ? 3 : 0;
}
int ncclGetVersion(int* v) { *v = 22703; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) {
	pthread_mutex_lock(&gmu); unsigned long k = ++idctr; pthread_mutex_unlock(&gmu);
	memset(id->internal, 0x5a, 128); memcpy(id->internal + 8, &k, sizeof k); return 0; }
int ncclCommInitRank(comm** out, int n, ncclUniqueId id, int rank) {
	if (id.internal[0] != 0x5a || n < 1 || n > MAXR || rank < 0 || rank >= n) return 4;
	pthread_mutex_lock(&gmu);
	clique* c = cliques;
	while (c && memcmp(c->id, id.internal, 128)) c = c->next;
	if (!c) { c = calloc(1, sizeof *c); memcpy(c->id, id.internal, 128); c->n = n;
		pthread_mutex_init(&c->mu, 0); pthread_cond_init(&c->cv, 0); c->next = cliques; cliques = c; }
	pthread_mutex_unlock(&gmu);
	comm* m = calloc(1, sizeof *m); m->c = c; m->rank = rank;
	pthread_mutex_lock(&c->mu); int r = barrier(c); pthread_mutex_unlock(&c->mu);
	*out = m; return r; }
int ncclCommDestroy(comm* m) { if (!m) return 4; free(m); return 0; }
int ncclCommAbort(comm* m) {
	if (!m) return 4;
	pthread_mutex_lock(&m->c->mu); m->c->aborted = 1; pthread_cond_broadcast(&m->c->cv); pthread_mutex_unlock(&m->c->mu);
	free(m); return 0; }
int ncclCommGetAsyncError(comm* m, int* e) { *e = m && m->c->aborted ? 3 : 0; return 0; }
int ncclCommCount(const comm* m, int* n) { *n = m->c->n; return 0; }
int ncclCommUserRank(const comm* m, int* r) { *r = m->rank; return 0; }

/* kind: 0 all-reduce, 1 reduce-scatter, 2 all-gather, 3 broadcast. count is per the NCCL call. */
static int coll(int kind, const void* s, void* r, size_t count, int dt, int op, int root, comm* m) {
	if (!m) return 4;
	if (dt != 2 && dt != 4 && dt != 7 && dt != 8) return 5; /* ncclInvalidUsage */
	clique* c = m->c; int n = c->n, me = m->rank;
	size_t es = dtsize(dt), outn = kind == 2 ? count * n : count;
	void* tmp = malloc(outn * es + 1);
	pthread_mutex_lock(&c->mu);
	c->send[me] = s;
	int rc = barrier(c);
	if (rc) goto out;
	if (kind == 3) memcpy(tmp, c->send[root], count * es);
	else if (kind == 2) for (int k = 0; k < n; k++) memcpy((char*)tmp + k * count * es, c->send[k], count * es);
	else {
		size_t off = kind == 1 ? me * count : 0;
		for (size_t i = 0; i < count; i++) {
			double a = get(c->send[0], dt, off + i);
			for (int k = 1; k < n; k++) {
				double b = get(c->send[k], dt, off + i);
				a = op == 1 ? a * b : op == 2 ? (b > a ? b : a) : op == 3 ? (b < a ? b : a) : a + b;
			}
			if (op == 4) a = dt == 4 || dt == 2 ? (double)((int64_t)a / n) : a / n;
			put(tmp, dt, i, a);
		}
	}
	rc = barrier(c);
	if (!rc) memcpy(r, tmp, outn * es);
out:
	pthread_mutex_unlock(&c->mu);
	free(tmp);
	return rc; }
int ncclAllReduce(const void* s, void* r, size_t n, int dt, int op, comm* m, void* st) { return coll(0, s, r, n, dt, op, 0, m); }
int ncclReduceScatter(const void* s, void* r, size_t n, int dt, int op, comm* m, void* st) { return coll(1, s, r, n, dt, op, 0, m); }
int ncclAllGather(const void* s, void* r, size_t n, int dt, comm* m, void* st) { return coll(2, s, r, n, dt, 0, 0, m); }
int ncclBroadcast(const void* s, void* r, size_t n, int dt, int root, comm* m, void* st) { return coll(3, s, r, n, dt, 0, root, m); }
int ncclSend(const void* s, size_t n, int dt, int peer, comm* m, void* st) {
	if (!m) return 4;
	clique* c = m->c; size_t b = n * dtsize(dt);
	msg* g = malloc(sizeof *g + b); g->next = 0; g->bytes = b; memcpy(g->data, s, b);
	pthread_mutex_lock(&c->mu);
	msg** q = &c->box[m->rank][peer]; while (*q) q = &(*q)->next; *q = g;
	pthread_cond_broadcast(&c->cv); pthread_mutex_unlock(&c->mu); return 0; }
int ncclRecv(void* r, size_t n, int dt, int peer, comm* m, void* st) {
	if (!m) return 4;
	clique* c = m->c; int rc = 0;
	pthread_mutex_lock(&c->mu);
	while (!c->box[peer][m->rank] && !c->aborted) pthread_cond_wait(&c->cv, &c->mu);
	if (c->aborted) rc = 3;
	else { msg* g = c->box[peer][m->rank]; c->box[peer][m->rank] = g->next;
		if (g->bytes != n * dtsize(dt)) rc = 5; else memcpy(r, g->data, g->bytes); free(g); }
	pthread_mutex_unlock(&c->mu); return rc; }
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
const char* ncclGetErrorString(int r) {
	return r == 3 ? "internal error (fake: communicator aborted)" : r == 4 ? "invalid argument" : r == 5 ? "invalid usage" : "unhandled error"; }
