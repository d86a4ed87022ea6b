//go:build cgo

package mpi

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

// OpenMPI's handles are pointers (MPI_Comm is struct ompi_communicator_t*, and so on), and
// its predefined handles are the addresses of exported objects (MPI_COMM_WORLD is
// &ompi_mpi_comm_world): no mpi.h is needed to call it. MPICH's handles are ints and are
// not supported.
typedef void* h_t;
typedef uintptr_t u;

// gp_status mirrors OpenMPI's MPI_Status (mpi.h, OpenMPI 2 to 5).
typedef struct { int source, tag, error, cancelled; size_t ucount; } gp_status;

static void* gp_lib;
static struct {
	int (*init_thread)(int*, char***, int, int*);
	int (*initialized)(int*);
	int (*finalized)(int*);
	int (*finalize)(void);
	int (*abort)(h_t, int);
	int (*comm_idup)(h_t, h_t*, h_t*);
	int (*comm_free)(h_t*);
	int (*comm_rank)(h_t, int*);
	int (*comm_size)(h_t, int*);
	int (*comm_set_errhandler)(h_t, h_t);
	int (*comm_get_attr)(h_t, int, void*, int*);
	int (*iallreduce)(const void*, void*, int, h_t, h_t, h_t, h_t*);
	int (*ibcast)(void*, int, h_t, int, h_t, h_t*);
	int (*iallgather)(const void*, int, h_t, void*, int, h_t, h_t, h_t*);
	int (*iallgatherv)(const void*, int, h_t, void*, const int*, const int*, h_t, h_t, h_t*);
	int (*ireduce_scatter)(const void*, void*, const int*, h_t, h_t, h_t, h_t*);
	int (*ibarrier)(h_t, h_t*);
	int (*isend)(const void*, int, h_t, int, int, h_t, h_t*);
	int (*irecv)(void*, int, h_t, int, int, h_t, h_t*);
	int (*testsome)(int, h_t*, int*, int*, gp_status*);
	int (*cancel)(h_t*);
	int (*error_string)(int, char*, int*);
	int (*get_library_version)(char*, int*);
} gp_f;

static const char* gp_fnames[] = {"MPI_Init_thread", "MPI_Initialized", "MPI_Finalized", "MPI_Finalize",
	"MPI_Abort", "MPI_Comm_idup", "MPI_Comm_free", "MPI_Comm_rank", "MPI_Comm_size", "MPI_Comm_set_errhandler",
	"MPI_Comm_get_attr", "MPI_Iallreduce", "MPI_Ibcast", "MPI_Iallgather", "MPI_Iallgatherv", "MPI_Ireduce_scatter",
	"MPI_Ibarrier", "MPI_Isend", "MPI_Irecv", "MPI_Testsome", "MPI_Cancel", "MPI_Error_string",
	"MPI_Get_library_version", 0};

// The predefined handles, in the order of the Go constants h*.
static const char* gp_hnames[] = {"ompi_mpi_comm_world", "ompi_mpi_float", "ompi_mpi_double", "ompi_mpi_int64_t",
	"ompi_mpi_byte", "ompi_mpi_uint16_t", "ompi_mpi_op_sum", "ompi_mpi_op_max", "ompi_mpi_op_min",
	"ompi_mpi_errors_return", 0};
static h_t gp_h[16];

// gp_open loads path (RTLD_GLOBAL: OpenMPI's plugins resolve libmpi's symbols) and resolves
// every function and handle. It returns 0, or -1 with the reason in err.
static int gp_open(const char* path, char* err, int n) {
	void* l = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!l) { snprintf(err, n, "%s", dlerror()); return -1; }
	void** slots = (void**)&gp_f;
	for (int i = 0; gp_fnames[i]; i++) {
		dlerror();
		slots[i] = dlsym(l, gp_fnames[i]);
		if (!slots[i]) { snprintf(err, n, "%s: dlsym %s: %s (not OpenMPI?)", path, gp_fnames[i], dlerror()); return -1; }
	}
	for (int i = 0; gp_hnames[i]; i++) {
		dlerror();
		gp_h[i] = dlsym(l, gp_hnames[i]);
		if (!gp_h[i]) { snprintf(err, n, "%s: dlsym %s: %s (not OpenMPI? MPICH's handles are not pointers)", path, gp_hnames[i], dlerror()); return -1; }
	}
	gp_lib = l;
	return 0;
}

static u gp_handle(int i) { return (u)gp_h[i]; }

static int gp_init(int required, int* provided) {
	int done = 0;
	gp_f.initialized(&done);
	if (done) return -2;
	int r = gp_f.init_thread(NULL, NULL, required, provided);
	if (r == 0) r = gp_f.comm_set_errhandler(gp_h[0], gp_h[9]);
	return r;
}
static int gp_finalize(void) { return gp_f.finalize(); }
static int gp_abort(u comm, int code) { return gp_f.abort((h_t)comm, code); }
static int gp_rank_size(u comm, int* rank, int* size) {
	int r = gp_f.comm_rank((h_t)comm, rank);
	return r ? r : gp_f.comm_size((h_t)comm, size);
}
static int gp_tag_ub(u comm, int* ub) {
	int* v = 0; int flag = 0;
	int r = gp_f.comm_get_attr((h_t)comm, 0, &v, &flag); // keyval 0 is MPI_TAG_UB in OpenMPI
	*ub = (r == 0 && flag && v) ? *v : 32767;
	return r;
}
static int gp_idup(u comm, u newcomm, h_t* req) { return gp_f.comm_idup((h_t)comm, (h_t*)newcomm, req); }
static int gp_set_errhandler(u comm) { return gp_f.comm_set_errhandler((h_t)comm, gp_h[9]); }
static int gp_comm_free(u comm) { h_t c = (h_t)comm; return gp_f.comm_free(&c); }
static int gp_iallreduce(u send, u recv, int n, u dt, u op, u comm, h_t* req) {
	return gp_f.iallreduce((const void*)send, (void*)recv, n, (h_t)dt, (h_t)op, (h_t)comm, req);
}
static int gp_ibcast(u buf, int n, u dt, int root, u comm, h_t* req) {
	return gp_f.ibcast((void*)buf, n, (h_t)dt, root, (h_t)comm, req);
}
static int gp_iallgather(u send, int sn, u recv, int rn, u dt, u comm, h_t* req) {
	return gp_f.iallgather((const void*)send, sn, (h_t)dt, (void*)recv, rn, (h_t)dt, (h_t)comm, req);
}
static int gp_iallgatherv(u send, int sn, u recv, u counts, u displs, u dt, u comm, h_t* req) {
	return gp_f.iallgatherv((const void*)send, sn, (h_t)dt, (void*)recv, (const int*)counts, (const int*)displs, (h_t)dt, (h_t)comm, req);
}
static int gp_ireduce_scatter(u send, u recv, u counts, u dt, u op, u comm, h_t* req) {
	return gp_f.ireduce_scatter((const void*)send, (void*)recv, (const int*)counts, (h_t)dt, (h_t)op, (h_t)comm, req);
}
static int gp_ibarrier(u comm, h_t* req) { return gp_f.ibarrier((h_t)comm, req); }
static int gp_isend(u buf, int n, u dt, int peer, int tag, u comm, h_t* req) {
	return gp_f.isend((const void*)buf, n, (h_t)dt, peer, tag, (h_t)comm, req);
}
static int gp_irecv(u buf, int n, u dt, int peer, int tag, u comm, h_t* req) {
	return gp_f.irecv((void*)buf, n, (h_t)dt, peer, tag, (h_t)comm, req);
}
static int gp_testsome(int n, h_t* reqs, int* count, int* idx, gp_status* st) {
	return gp_f.testsome(n, reqs, count, idx, st);
}
static int gp_cancel(u req) { h_t r = (h_t)req; return gp_f.cancel(&r); }
static void gp_error_string(int code, char* s, int n) {
	int len = 0;
	s[0] = 0;
	if (n >= 256 && gp_f.error_string && gp_f.error_string(code, s, &len) == 0) s[len < n ? len : n - 1] = 0;
}
static void gp_version(char* s, int n) {
	int len = 0;
	s[0] = 0;
	if (n >= 256 && gp_f.get_library_version(s, &len) == 0) s[len < n ? len : n - 1] = 0;
}
static void gp_yield(void) { sched_yield(); }
*/
import "C"

import (
	"strings"
	"unsafe"
)

// cgoAvailable reports whether this build can load libmpi.
const cgoAvailable = true

// status is a completed request's MPI_Status (OpenMPI's layout).
type status C.gp_status

func (s *status) sourceTag() (int, int)   { return int(s.source), int(s.tag) }
func (s *status) errCode() int            { return int(s.error) }
func (s *status) wasCancelled() bool      { return s.cancelled != 0 }
func (s *status) receivedBytes() int      { return int(s.ucount) }
func statusAt(st []status, i int) *status { return &st[i] }

func openLib(path string) error {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var msg [1024]C.char
	if C.gp_open(cs, &msg[0], C.int(len(msg))) != 0 {
		return errorString(C.GoString(&msg[0]))
	}
	for i := range handles {
		handles[i] = uintptr(C.gp_handle(C.int(i)))
	}
	return nil
}

// errorString is an error with a fixed message (the loader's reasons).
type errorString string

func (e errorString) Error() string { return string(e) }

func mpiInit(required int) (provided, code int) {
	var p C.int
	code = int(C.gp_init(C.int(required), &p))
	return int(p), code
}

func mpiFinalize() int                    { return int(C.gp_finalize()) }
func mpiAbort(comm uintptr, code int) int { return int(C.gp_abort(C.u(comm), C.int(code))) }
func mpiYield()                           { C.gp_yield() }
func mpiCommFree(comm uintptr) int        { return int(C.gp_comm_free(C.u(comm))) }
func mpiSetErrhandler(comm uintptr) int   { return int(C.gp_set_errhandler(C.u(comm))) }
func mpiCancel(req uintptr) int           { return int(C.gp_cancel(C.u(req))) }
func mpiIbarrier(comm uintptr, req *uintptr) int {
	return int(C.gp_ibarrier(C.u(comm), (*C.h_t)(unsafe.Pointer(req))))
}

func mpiRankSize(comm uintptr) (rank, size, code int) {
	var r, s C.int
	code = int(C.gp_rank_size(C.u(comm), &r, &s))
	return int(r), int(s), code
}

func mpiTagUB(comm uintptr) int {
	var ub C.int
	C.gp_tag_ub(C.u(comm), &ub)
	return int(ub)
}

// mpiIdup duplicates comm into *newcomm, which must stay pinned until req completes.
func mpiIdup(comm uintptr, newcomm *uintptr, req *uintptr) int {
	return int(C.gp_idup(C.u(comm), C.u(uintptr(unsafe.Pointer(newcomm))), (*C.h_t)(unsafe.Pointer(req))))
}

func mpiIallreduce(send, recv uintptr, n int, dt, op, comm uintptr, req *uintptr) int {
	return int(C.gp_iallreduce(C.u(send), C.u(recv), C.int(n), C.u(dt), C.u(op), C.u(comm), (*C.h_t)(unsafe.Pointer(req))))
}

func mpiIbcast(buf uintptr, n int, dt uintptr, root int, comm uintptr, req *uintptr) int {
	return int(C.gp_ibcast(C.u(buf), C.int(n), C.u(dt), C.int(root), C.u(comm), (*C.h_t)(unsafe.Pointer(req))))
}

func mpiIallgather(send uintptr, sn int, recv uintptr, rn int, dt, comm uintptr, req *uintptr) int {
	return int(C.gp_iallgather(C.u(send), C.int(sn), C.u(recv), C.int(rn), C.u(dt), C.u(comm), (*C.h_t)(unsafe.Pointer(req))))
}

func mpiIallgatherv(send uintptr, sn int, recv, counts, displs, dt, comm uintptr, req *uintptr) int {
	return int(C.gp_iallgatherv(C.u(send), C.int(sn), C.u(recv), C.u(counts), C.u(displs), C.u(dt), C.u(comm), (*C.h_t)(unsafe.Pointer(req))))
}

func mpiIreduceScatter(send, recv, counts, dt, op, comm uintptr, req *uintptr) int {
	return int(C.gp_ireduce_scatter(C.u(send), C.u(recv), C.u(counts), C.u(dt), C.u(op), C.u(comm), (*C.h_t)(unsafe.Pointer(req))))
}

func mpiIsend(buf uintptr, n int, dt uintptr, peer, tag int, comm uintptr, req *uintptr) int {
	return int(C.gp_isend(C.u(buf), C.int(n), C.u(dt), C.int(peer), C.int(tag), C.u(comm), (*C.h_t)(unsafe.Pointer(req))))
}

func mpiIrecv(buf uintptr, n int, dt uintptr, peer, tag int, comm uintptr, req *uintptr) int {
	return int(C.gp_irecv(C.u(buf), C.int(n), C.u(dt), C.int(peer), C.int(tag), C.u(comm), (*C.h_t)(unsafe.Pointer(req))))
}

// mpiTestsome tests reqs (a Go slice, read and written during the call only), writing the
// indices of the completed ones into idx and their statuses into st; it returns how many.
func mpiTestsome(reqs []uintptr, idx []int32, st []status) (n, code int) {
	if len(reqs) == 0 {
		return 0, 0
	}
	var c C.int
	code = int(C.gp_testsome(C.int(len(reqs)), (*C.h_t)(unsafe.Pointer(&reqs[0])), &c, (*C.int)(unsafe.Pointer(&idx[0])), (*C.gp_status)(&st[0])))
	return int(c), code
}

func mpiErrorString(code int) string {
	var s [512]C.char
	C.gp_error_string(C.int(code), &s[0], C.int(len(s)))
	return C.GoString(&s[0])
}

func mpiVersion() string {
	var s [4096]C.char
	C.gp_version(&s[0], C.int(len(s)))
	v, _, _ := strings.Cut(strings.TrimSpace(C.GoString(&s[0])), ",")
	return v
}
