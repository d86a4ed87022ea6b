// Package driver binds the CUDA driver API (libcuda.so.1, shipped with the NVIDIA driver),
// loaded at run time: it needs no cuda.h or CUDA toolkit to build, and a binary that uses it
// starts on machines without a GPU, where Load reports why it cannot run.
//
// Contexts are per OS thread in CUDA; every call here that needs one makes its Context
// current on a locked OS thread for the duration of the call, so goroutines may call from
// anywhere. Device memory is a DevPtr (CUdeviceptr); streams and events are opaque handles.
package driver

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

// EnvVar names a full path to libcuda.so.1 that overrides the library search.
const EnvVar = "CUDA_DRIVER_LIBRARY"

// ErrNoDevice is wrapped by Load and DeviceCount's callers when no CUDA device is usable.
var ErrNoDevice = errors.New("cuda: no CUDA device")

// Error is a CUresult other than CUDA_SUCCESS.
type Error struct {
	// Code is the CUresult.
	Code int
	// Op is the driver function that failed.
	Op string
	// Msg is cuGetErrorString's text.
	Msg string
}

// Error formats the failure with the function and CUresult.
func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %s (CUresult %d)", e.Op, e.Msg, e.Code) }

// Is matches ErrNoDevice for CUDA_ERROR_NO_DEVICE (100).
func (e *Error) Is(target error) bool { return target == ErrNoDevice && e.Code == 100 }

const (
	fInit = iota
	fDriverGetVersion
	fDeviceGetCount
	fDeviceGet
	fDeviceGetName
	fDeviceGetAttribute
	fDeviceTotalMem
	fPrimaryCtxRetain
	fPrimaryCtxRelease
	fCtxSetCurrent
	fCtxSynchronize
	fMemAlloc
	fMemFree
	fMemGetInfo
	fMemcpyHtoD
	fMemcpyDtoH
	fMemcpyDtoD
	fMemcpyHtoDAsync
	fMemcpyDtoHAsync
	fMemcpyDtoDAsync
	fMemsetD32Async
	fMemHostAlloc
	fMemFreeHost
	fStreamCreate
	fStreamDestroy
	fStreamSynchronize
	fStreamQuery
	fStreamWaitEvent
	fEventCreate
	fEventDestroy
	fEventRecord
	fEventQuery
	fEventSynchronize
	fEventElapsedTime
	fModuleLoadData
	fModuleUnload
	fModuleGetFunction
	fLaunchKernel
	fGetErrorString
	nFuncs
)

var names = [nFuncs]string{"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName",
	"cuDeviceGetAttribute", "cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
	"cuCtxSetCurrent", "cuCtxSynchronize", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2",
	"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
	"cuMemcpyDtoDAsync_v2", "cuMemsetD32Async", "cuMemHostAlloc", "cuMemFreeHost", "cuStreamCreate",
	"cuStreamDestroy_v2", "cuStreamSynchronize", "cuStreamQuery", "cuStreamWaitEvent", "cuEventCreate",
	"cuEventDestroy_v2", "cuEventRecord", "cuEventQuery", "cuEventSynchronize", "cuEventElapsedTime",
	"cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel", "cuGetErrorString"}

var (
	once    sync.Once
	fn      [nFuncs]dl.Func
	lib     *dl.Lib
	loadErr error
)

// Load opens libcuda.so.1 and calls cuInit(0), once. Every other function calls it. The
// error names the library and the candidates tried, or says the build has no cgo.
func Load() error {
	once.Do(func() {
		l, err := dl.Open(dl.Candidates(EnvVar, "libcuda.so.1"))
		if err != nil {
			loadErr = fmt.Errorf("cuda: NVIDIA driver library libcuda.so.1 (set %s to its path): %w", EnvVar, err)
			return
		}
		slots := make([]*dl.Func, nFuncs)
		for i := range fn {
			slots[i] = &fn[i]
		}
		if err := l.Table(names[:], slots); err != nil {
			loadErr = fmt.Errorf("cuda: %w", err)
			return
		}
		lib = l
		loadErr = call("cuInit", fInit, 0)
	})
	return loadErr
}

// LibraryPath is the libcuda that Load opened, or "".
func LibraryPath() string {
	if Load() != nil {
		return ""
	}
	return lib.Path
}

// call runs driver function i and converts its CUresult.
func call(op string, i int, args ...uintptr) error {
	return result(op, dl.Call(fn[i], args...))
}

func result(op string, r int) error {
	if r == 0 {
		return nil
	}
	msg := "unknown error"
	s := dl.New[*byte]()
	if fn[fGetErrorString] != nil && dl.Call(fn[fGetErrorString], uintptr(r), ptr(s)) == 0 && *s != nil {
		msg = goString(*s)
	}
	runtime.KeepAlive(s)
	return &Error{Code: r, Op: op, Msg: msg}
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

func dlCallImpl(f dl.Func, args ...uintptr) int { return dl.Call(f, args...) }

// ptr is the address of Go heap memory handed to C; callers keep it alive.
func ptr[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }

// locked runs f on a locked OS thread with ctx current.
func locked(c Context, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if c != 0 {
		if err := makeCurrent(c); err != nil {
			return err
		}
	}
	return f()
}

// current maps an OS thread (its id) to the context this package last made current on it.
// CUDA's current context is the thread's until changed, so a call on a thread where its
// context is current already skips cuCtxSetCurrent: the context is set once per OS thread
// and context, not at every call. Go ends an OS thread only when a goroutine exits locked
// to it (this package unlocks before returning), and Linux reuses a thread id only after the
// pid space wraps; releasing a primary context forgets every entry.
var current sync.Map // int -> Context

// makeCurrent makes c current on the calling OS thread, which the caller has locked.
// Where the OS gives no thread id (threadID), the context is set at every call.
func makeCurrent(c Context) error {
	tid, ok := threadID()
	if !ok {
		return call("cuCtxSetCurrent", fCtxSetCurrent, uintptr(c))
	}
	if v, ok := current.Load(tid); ok && v.(Context) == c {
		return nil
	}
	if err := call("cuCtxSetCurrent", fCtxSetCurrent, uintptr(c)); err != nil {
		current.Delete(tid)
		return err
	}
	current.Store(tid, c)
	return nil
}
