// Package libnccl binds the NCCL 2.x calls the project needs, with the API declared by us
// (no nccl.h): libnccl.so.2 is loaded at run time from $NCCL_LIBRARY, $GPU_LIB_DIRS, the
// linker's path or PyTorch's nvidia-nccl wheel, so the package builds anywhere and fails with
// a clear error where NCCL is absent. The process-group backend is parallel/comm/nccl.
package libnccl

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

// DataType mirrors ncclDataType_t (nccl.h, NCCL >= 2.10).
type DataType int

// NCCL data types.
const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	Bfloat16 DataType = 9
)

// RedOp mirrors ncclRedOp_t.
type RedOp int

// NCCL reduction operations (Avg needs NCCL >= 2.10).
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

// UniqueID is an ncclUniqueId: 128 opaque bytes made by one rank and sent to the others.
type UniqueID [128]byte

// Comm is an ncclComm_t.
type Comm uintptr

// EnvVar names a full path to libnccl.so.2 that overrides the search.
const EnvVar = "NCCL_LIBRARY"

// Error is a non-success ncclResult_t.
type Error struct {
	// Code is the ncclResult_t.
	Code int
	// Op is the NCCL function that failed.
	Op string
	// Msg is ncclGetErrorString's text.
	Msg string
}

// Error formats the failure with the function and ncclResult_t.
func (e *Error) Error() string {
	return fmt.Sprintf("nccl: %s: %s (ncclResult_t %d)", e.Op, e.Msg, e.Code)
}

const (
	fGetVersion = iota
	fGetUniqueID
	fCommInitRank
	fCommDestroy
	fCommAbort
	fCommGetAsyncError
	fAllReduce
	fReduceScatter
	fAllGather
	fBroadcast
	fSend
	fRecv
	fGroupStart
	fGroupEnd
	fGetErrorString
	nFuncs
)

var names = [nFuncs]string{"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclCommAbort",
	"ncclCommGetAsyncError", "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclSend",
	"ncclRecv", "ncclGroupStart", "ncclGroupEnd", "ncclGetErrorString"}

var (
	once    sync.Once
	fn      [nFuncs]dl.Func
	lib     *dl.Lib
	loadErr error
)

// Load opens libnccl.so.2, once. Every other function calls it.
func Load() error {
	once.Do(func() {
		l, err := dl.Open(dl.Candidates(EnvVar, "libnccl.so.2", "libnccl.so"))
		if err != nil {
			loadErr = fmt.Errorf("nccl: libnccl.so.2 (set %s, or GPU_LIB_DIRS, or pip install nvidia-nccl-cu12): %w", EnvVar, err)
			return
		}
		slots := make([]*dl.Func, nFuncs)
		for i := range fn {
			slots[i] = &fn[i]
		}
		if err := l.Table(names[:], slots); err != nil {
			loadErr = fmt.Errorf("nccl: %w", err)
			return
		}
		lib = l
	})
	return loadErr
}

// LibraryPath is the file Load opened, or "".
func LibraryPath() string {
	if Load() != nil {
		return ""
	}
	return lib.Path
}

func call(op string, i int, args ...uintptr) error {
	if err := Load(); err != nil {
		return err
	}
	return result(op, dl.Call(fn[i], args...))
}

func result(op string, r int) error {
	if r == 0 {
		return nil
	}
	return &Error{Code: r, Op: op, Msg: dl.CallString(fn[fGetErrorString], r)}
}

// Version returns NCCL's version code (22703 for 2.27.3).
func Version() (int, error) {
	v := dl.New[int32]()
	err := call("ncclGetVersion", fGetVersion, uintptr(unsafe.Pointer(v)))
	runtime.KeepAlive(v)
	return int(*v), err
}

// GetUniqueID makes the id that every rank passes to CommInitRank.
func GetUniqueID() (UniqueID, error) {
	id := dl.New[UniqueID]()
	err := call("ncclGetUniqueId", fGetUniqueID, uintptr(unsafe.Pointer(id)))
	runtime.KeepAlive(id)
	return *id, err
}

// CommInitRank joins rank of nranks to the communicator of id. It blocks until every rank
// has joined, and needs the rank's CUDA context current on the calling (locked) thread.
func CommInitRank(nranks int, id UniqueID, rank int) (Comm, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	c, idp := dl.New[uintptr](), dl.New[UniqueID]()
	*idp = id
	err := result("ncclCommInitRank", dl.CallID(fn[fCommInitRank], uintptr(unsafe.Pointer(c)), nranks, (*[128]byte)(idp), rank))
	runtime.KeepAlive(c)
	if err != nil {
		return 0, fmt.Errorf("rank %d of %d: %w", rank, nranks, err)
	}
	return Comm(*c), nil
}

// Destroy frees the communicator after its operations have completed.
func (c Comm) Destroy() error { return call("ncclCommDestroy", fCommDestroy, uintptr(c)) }

// Abort frees the communicator at once, ending its pending operations (on every rank, which
// then see errors): how a timed-out or cancelled collective is stopped.
func (c Comm) Abort() error { return call("ncclCommAbort", fCommAbort, uintptr(c)) }

// AsyncError returns an error NCCL detected in the background (a peer failed), or nil.
func (c Comm) AsyncError() error {
	v := dl.New[int32]()
	err := call("ncclCommGetAsyncError", fCommGetAsyncError, uintptr(c), uintptr(unsafe.Pointer(v)))
	runtime.KeepAlive(v)
	if err != nil {
		return err
	}
	return result("async error", int(*v))
}

// AllReduce enqueues an all-reduce of count elements from send into recv (device pointers,
// may be equal) on stream.
func (c Comm) AllReduce(send, recv uintptr, count int, dt DataType, op RedOp, stream uintptr) error {
	return call("ncclAllReduce", fAllReduce, send, recv, uintptr(count), uintptr(dt), uintptr(op), uintptr(c), stream)
}

// ReduceScatter enqueues a reduce-scatter: recv gets recvCount elements, send has
// recvCount*nranks.
func (c Comm) ReduceScatter(send, recv uintptr, recvCount int, dt DataType, op RedOp, stream uintptr) error {
	return call("ncclReduceScatter", fReduceScatter, send, recv, uintptr(recvCount), uintptr(dt), uintptr(op), uintptr(c), stream)
}

// AllGather enqueues an all-gather: send has sendCount elements, recv sendCount*nranks.
func (c Comm) AllGather(send, recv uintptr, sendCount int, dt DataType, stream uintptr) error {
	return call("ncclAllGather", fAllGather, send, recv, uintptr(sendCount), uintptr(dt), uintptr(c), stream)
}

// Broadcast enqueues a broadcast of root's send into every rank's recv.
func (c Comm) Broadcast(send, recv uintptr, count int, dt DataType, root int, stream uintptr) error {
	return call("ncclBroadcast", fBroadcast, send, recv, uintptr(count), uintptr(dt), uintptr(root), uintptr(c), stream)
}

// Send enqueues a send of count elements to peer.
func (c Comm) Send(buf uintptr, count int, dt DataType, peer int, stream uintptr) error {
	return call("ncclSend", fSend, buf, uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), stream)
}

// Recv enqueues a receive of count elements from peer.
func (c Comm) Recv(buf uintptr, count int, dt DataType, peer int, stream uintptr) error {
	return call("ncclRecv", fRecv, buf, uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), stream)
}

// GroupStart begins a group of calls that NCCL launches together (GroupEnd).
func GroupStart() error { return call("ncclGroupStart", fGroupStart) }

// GroupEnd launches the calls since GroupStart.
func GroupEnd() error { return call("ncclGroupEnd", fGroupEnd) }
