// Package cublas binds the cuBLAS calls the project needs (SGEMM, GemmEx for fp16/bf16 with
// float32 accumulation, strided batched GEMM), loading libcublas.so.13, .12 or .11 (with its
// libcublasLt) at run time. cuBLAS symbols are versioned, so linking against one CUDA
// release would tie the binary to it; dlopen runs with whichever PyTorch's wheels provide.
//
// cuBLAS is column-major. Gemm takes row-major operands and swaps them, since a row-major
// C = A·B is the column-major Cᵀ = Bᵀ·Aᵀ.
package cublas

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

// EnvVar names a full path to libcublas that overrides the search.
const EnvVar = "CUBLAS_LIBRARY"

// DataType mirrors cudaDataType_t.
type DataType int

// Element types of GemmEx.
const (
	R32F  DataType = 0
	R16F  DataType = 2
	R16BF DataType = 14
)

// Compute types (cublasComputeType_t).
const (
	compute32F  = 68
	gemmDefault = -1 // CUBLAS_GEMM_DEFAULT
)

// Error is a cublasStatus_t other than CUBLAS_STATUS_SUCCESS.
type Error struct {
	// Code is the cublasStatus_t.
	Code int
	// Op is the cuBLAS function that failed.
	Op string
	// Msg is cublasGetStatusString's text, when the library has it.
	Msg string
}

// Error formats the failure with the function and status.
func (e *Error) Error() string { return fmt.Sprintf("cublas: %s: %s (status %d)", e.Op, e.Msg, e.Code) }

const (
	fCreate = iota
	fDestroy
	fGetVersion
	fSetStream
	fSgemm
	fGemmEx
	fGemmStridedBatchedEx
	nFuncs
)

var names = [nFuncs]string{"cublasCreate_v2", "cublasDestroy_v2", "cublasGetVersion_v2", "cublasSetStream_v2",
	"cublasSgemm_v2", "cublasGemmEx", "cublasGemmStridedBatchedEx"}

var (
	once    sync.Once
	fn      [nFuncs]dl.Func
	fStatus dl.Func
	lib     *dl.Lib
	loadErr error
)

// Load opens cuBLAS, once: $CUBLAS_LIBRARY, else libcublas.so.13, .12, .11 in the places
// dl.Candidates searches (PyTorch's nvidia-cublas wheel included).
func Load() error {
	once.Do(func() {
		var errs []string
		for _, major := range []string{"13", "12", "11"} {
			// libcublasLt first, RTLD_GLOBAL, so that libcublas finds it by soname.
			_, _ = dl.Open(dl.Candidates("CUBLASLT_LIBRARY", "libcublasLt.so."+major))
			l, err := dl.Open(dl.Candidates(EnvVar, "libcublas.so."+major))
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
			loadErr = fmt.Errorf("cublas: no libcublas.so.{13,12,11} (set %s or GPU_LIB_DIRS): %s", EnvVar, strings.Join(errs, "; "))
			return
		}
		slots := make([]*dl.Func, nFuncs)
		for i := range fn {
			slots[i] = &fn[i]
		}
		if err := lib.Table(names[:], slots); err != nil {
			loadErr = fmt.Errorf("cublas: %w", err)
		}
		fStatus, _ = lib.Sym("cublasGetStatusString")
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
	r := dl.Call(fn[i], args...)
	if r == 0 {
		return nil
	}
	msg := dl.CallString(fStatus, r)
	if msg == "" {
		msg = "cuBLAS error"
	}
	return &Error{Code: r, Op: op, Msg: msg}
}

// Handle is a cublasHandle_t, bound to the context current when it was created.
type Handle uintptr

// Create makes a handle; the device's CUDA context must be current on the calling (locked)
// OS thread.
func Create() (Handle, error) {
	h := dl.New[uintptr]()
	err := call("cublasCreate", fCreate, uintptr(unsafe.Pointer(h)))
	runtime.KeepAlive(h)
	return Handle(*h), err
}

// Destroy frees the handle.
func (h Handle) Destroy() error { return call("cublasDestroy", fDestroy, uintptr(h)) }

// Version is cuBLAS's version number (e.g. 120201).
func (h Handle) Version() (int, error) {
	v := dl.New[int32]()
	err := call("cublasGetVersion", fGetVersion, uintptr(h), uintptr(unsafe.Pointer(v)))
	runtime.KeepAlive(v)
	return int(*v), err
}

// SetStream makes the handle enqueue on stream (a CUstream).
func (h Handle) SetStream(stream uintptr) error {
	return call("cublasSetStream", fSetStream, uintptr(h), stream)
}

// Gemm computes C = alpha·op(A)·op(B) + beta·C for row-major float32 device matrices:
// op(A) is m×k, op(B) is k×n, C is m×n; transA means A is stored k×m (likewise transB).
func (h Handle) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b uintptr, beta float32, c uintptr) error {
	ab := dl.New[[2]float32]()
	ab[0], ab[1] = alpha, beta
	lda, ldb := lead(transA, k, m), lead(transB, n, k)
	// Column-major Cᵀ(n×m) = op(B)ᵀ·op(A)ᵀ.
	err := call("cublasSgemm", fSgemm, uintptr(h), op(transB), op(transA), uintptr(n), uintptr(m), uintptr(k),
		uintptr(unsafe.Pointer(&ab[0])), b, uintptr(ldb), a, uintptr(lda), uintptr(unsafe.Pointer(&ab[1])), c, uintptr(n))
	runtime.KeepAlive(ab)
	count(fSgemm, R32F, err)
	if err != nil {
		return fmt.Errorf("%dx%dx%d: %w", m, n, k, err)
	}
	return nil
}

// GemmEx is Gemm with A and B of type in (R16F, R16BF or R32F), C of type out and float32
// accumulation: autocast's matmul on the GPU.
func (h Handle) GemmEx(transA, transB bool, m, n, k int, alpha float32, a, b uintptr, in DataType, beta float32, c uintptr, out DataType) error {
	ab := dl.New[[2]float32]()
	ab[0], ab[1] = alpha, beta
	lda, ldb := lead(transA, k, m), lead(transB, n, k)
	err := call("cublasGemmEx", fGemmEx, uintptr(h), op(transB), op(transA), uintptr(n), uintptr(m), uintptr(k),
		uintptr(unsafe.Pointer(&ab[0])), b, uintptr(in), uintptr(ldb), a, uintptr(in), uintptr(lda),
		uintptr(unsafe.Pointer(&ab[1])), c, uintptr(out), uintptr(n), compute32F, intArg(gemmDefault))
	runtime.KeepAlive(ab)
	count(fGemmEx, in, err)
	if err != nil {
		return fmt.Errorf("%dx%dx%d %v: %w", m, n, k, in, err)
	}
	return nil
}

// GemmStridedBatched runs batch GEMMs like GemmEx over matrices spaced strideA, strideB and
// strideC elements apart (attention's batched matmul, grouped convolutions).
func (h Handle) GemmStridedBatched(transA, transB bool, m, n, k int, alpha float32, a uintptr, strideA int64, b uintptr, strideB int64,
	in DataType, beta float32, c uintptr, strideC int64, out DataType, batch int) error {
	ab := dl.New[[2]float32]()
	ab[0], ab[1] = alpha, beta
	lda, ldb := lead(transA, k, m), lead(transB, n, k)
	err := call("cublasGemmStridedBatchedEx", fGemmStridedBatchedEx, uintptr(h), op(transB), op(transA), uintptr(n), uintptr(m), uintptr(k),
		uintptr(unsafe.Pointer(&ab[0])), b, uintptr(in), uintptr(ldb), uintptr(strideB), a, uintptr(in), uintptr(lda), uintptr(strideA),
		uintptr(unsafe.Pointer(&ab[1])), c, uintptr(out), uintptr(n), uintptr(strideC), uintptr(batch), compute32F, intArg(gemmDefault))
	runtime.KeepAlive(ab)
	count(fGemmStridedBatchedEx, in, err)
	if err != nil {
		return fmt.Errorf("batch %d of %dx%dx%d: %w", batch, m, n, k, err)
	}
	return nil
}

// calls counts the GEMMs issued, by function (fSgemm, fGemmEx, fGemmStridedBatchedEx) and
// input type (typeIndex).
var calls [nFuncs][3]atomic.Int64

func typeIndex(t DataType) int {
	switch t {
	case R16F:
		return 1
	case R16BF:
		return 2
	}
	return 0
}

// Calls returns how many GEMMs of the named cuBLAS function ("cublasSgemm", "cublasGemmEx",
// "cublasGemmStridedBatchedEx") with inputs of type t the process has issued successfully
// (a batched call counts once): cheap counters that show which path a program took, for
// example that autocast's matmuls and convolutions ran in 16 bits. Unknown names count 0.
func Calls(function string, t DataType) int64 {
	for i, n := range names {
		if n == function || strings.TrimSuffix(n, "_v2") == function {
			return calls[i][typeIndex(t)].Load()
		}
	}
	return 0
}

func count(f int, t DataType, err error) {
	if err == nil {
		calls[f][typeIndex(t)].Add(1)
	}
}

// lead is the leading dimension (row length) of a row-major operand stored rows×cols when
// not transposed.
func lead(trans bool, cols, rows int) int {
	if trans {
		return rows
	}
	return cols
}

func op(trans bool) uintptr {
	if trans {
		return 1 // CUBLAS_OP_T
	}
	return 0
}

func intArg(v int) uintptr { return uintptr(uint32(int32(v))) }
