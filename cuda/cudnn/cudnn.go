// Package cudnn binds the cuDNN convolution calls the project needs (the legacy descriptor
// API, present in cuDNN 8 and 9), loading libcudnn.so.9 or .8 at run time from $CUDNN_LIBRARY,
// $GPU_LIB_DIRS, the linker's path or PyTorch's nvidia-cudnn wheel, so the package builds
// anywhere and fails with a clear error where cuDNN is absent.
package cudnn

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

// EnvVar names a full path to libcudnn that overrides the search.
const EnvVar = "CUDNN_LIBRARY"

// DataType mirrors cudnnDataType_t.
type DataType int

// Element types.
const (
	Float    DataType = 0
	Half     DataType = 2
	BFloat16 DataType = 9
)

// Error is a cudnnStatus_t other than CUDNN_STATUS_SUCCESS.
type Error struct {
	// Code is the cudnnStatus_t.
	Code int
	// Op is the cuDNN function that failed.
	Op string
	// Msg is cudnnGetErrorString's text.
	Msg string
}

// Error formats the failure with the function and status.
func (e *Error) Error() string { return fmt.Sprintf("cudnn: %s: %s (status %d)", e.Op, e.Msg, e.Code) }

const (
	fCreate = iota
	fDestroy
	fSetStream
	fGetVersion
	fCreateTensor
	fSetTensor4d
	fDestroyTensor
	fCreateFilter
	fSetFilter4d
	fDestroyFilter
	fCreateConv
	fSetConv2d
	fSetConvMath
	fDestroyConv
	fFwdAlgoV7
	fBwdDataAlgoV7
	fBwdFilterAlgoV7
	fFwdWorkspace
	fBwdDataWorkspace
	fBwdFilterWorkspace
	fForward
	fBackwardData
	fBackwardFilter
	fGetErrorString
	nFuncs
)

var names = [nFuncs]string{"cudnnCreate", "cudnnDestroy", "cudnnSetStream", "cudnnGetVersion",
	"cudnnCreateTensorDescriptor", "cudnnSetTensor4dDescriptor", "cudnnDestroyTensorDescriptor",
	"cudnnCreateFilterDescriptor", "cudnnSetFilter4dDescriptor", "cudnnDestroyFilterDescriptor",
	"cudnnCreateConvolutionDescriptor", "cudnnSetConvolution2dDescriptor", "cudnnSetConvolutionMathType",
	"cudnnDestroyConvolutionDescriptor", "cudnnGetConvolutionForwardAlgorithm_v7",
	"cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
	"cudnnGetConvolutionForwardWorkspaceSize", "cudnnGetConvolutionBackwardDataWorkspaceSize",
	"cudnnGetConvolutionBackwardFilterWorkspaceSize", "cudnnConvolutionForward", "cudnnConvolutionBackwardData",
	"cudnnConvolutionBackwardFilter", "cudnnGetErrorString"}

var (
	once    sync.Once
	fn      [nFuncs]dl.Func
	lib     *dl.Lib
	loadErr error
)

// Load opens cuDNN, once: $CUDNN_LIBRARY, else libcudnn.so.9 or .8.
func Load() error {
	once.Do(func() {
		var errs []string
		for _, major := range []string{"9", "8"} {
			l, err := dl.Open(dl.Candidates(EnvVar, "libcudnn.so."+major))
			if err == nil {
				lib = l
				break
			}
			errs = append(errs, err.Error())
			if err == dl.ErrNoCgo {
				break
			}
		}
		if lib == nil {
			loadErr = fmt.Errorf("cudnn: no libcudnn.so.{9,8} (set %s or GPU_LIB_DIRS): %s", EnvVar, strings.Join(errs, "; "))
			return
		}
		slots := make([]*dl.Func, nFuncs)
		for i := range fn {
			slots[i] = &fn[i]
		}
		if err := lib.Table(names[:], slots); err != nil {
			loadErr = fmt.Errorf("cudnn: %w", err)
		}
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

// Version is cudnnGetVersion (90100 for 9.1.0), or 0 when cuDNN is not loaded.
func Version() int {
	if Load() != nil {
		return 0
	}
	return dl.Call(fn[fGetVersion])
}

func call(op string, i int, args ...uintptr) error {
	if err := Load(); err != nil {
		return err
	}
	r := dl.Call(fn[i], args...)
	if r == 0 {
		return nil
	}
	return &Error{Code: r, Op: op, Msg: dl.CallString(fn[fGetErrorString], r)}
}

// Handle is a cudnnHandle_t.
type Handle uintptr

// Create makes a handle; the device's context must be current on the calling (locked) thread.
func Create() (Handle, error) {
	h := dl.New[uintptr]()
	err := call("cudnnCreate", fCreate, uintptr(unsafe.Pointer(h)))
	runtime.KeepAlive(h)
	return Handle(*h), err
}

// Destroy frees the handle.
func (h Handle) Destroy() error { return call("cudnnDestroy", fDestroy, uintptr(h)) }

// SetStream makes the handle enqueue on stream (a CUstream).
func (h Handle) SetStream(stream uintptr) error {
	return call("cudnnSetStream", fSetStream, uintptr(h), stream)
}
