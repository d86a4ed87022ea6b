package driver

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

type (
	// Device is a CUdevice ordinal handle.
	Device int
	// Context is a CUcontext (here always a device's primary context).
	Context uintptr
	// DevPtr is a CUdeviceptr: an address in device memory.
	DevPtr uintptr
	// Stream is a CUstream; 0 is the legacy default stream.
	Stream uintptr
	// Event is a CUevent.
	Event uintptr
	// Module is a CUmodule (loaded PTX).
	Module uintptr
	// Function is a CUfunction (a kernel of a Module).
	Function uintptr
)

// Device attributes (CUdevice_attribute).
const (
	AttrMultiprocessorCount = 16
	AttrComputeCapMajor     = 75
	AttrComputeCapMinor     = 76
)

// DriverVersion returns the CUDA version the driver supports (12040 for 12.4).
func DriverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	v := dl.New[int32]()
	err := call("cuDriverGetVersion", fDriverGetVersion, ptr(v))
	runtime.KeepAlive(v)
	return int(*v), err
}

// DeviceCount returns the number of CUDA devices.
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	v := dl.New[int32]()
	err := call("cuDeviceGetCount", fDeviceGetCount, ptr(v))
	runtime.KeepAlive(v)
	return int(*v), err
}

// GetDevice returns the device of an ordinal.
func GetDevice(ordinal int) (Device, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	v := dl.New[int32]()
	err := call("cuDeviceGet", fDeviceGet, ptr(v), uintptr(ordinal))
	runtime.KeepAlive(v)
	if err != nil {
		return 0, fmt.Errorf("device %d: %w", ordinal, err)
	}
	return Device(*v), nil
}

// Name is the device's marketing name.
func (d Device) Name() (string, error) {
	buf := dl.New[[256]byte]()
	err := call("cuDeviceGetName", fDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), 255, uintptr(d))
	runtime.KeepAlive(buf)
	return goString(&buf[0]), err
}

// Attribute returns a CUdevice_attribute.
func (d Device) Attribute(attr int) (int, error) {
	v := dl.New[int32]()
	err := call("cuDeviceGetAttribute", fDeviceGetAttribute, ptr(v), uintptr(attr), uintptr(d))
	runtime.KeepAlive(v)
	return int(*v), err
}

// ComputeCapability returns (major, minor), e.g. (9, 0) for an H100/H200.
func (d Device) ComputeCapability() (int, int, error) {
	ma, err := d.Attribute(AttrComputeCapMajor)
	if err != nil {
		return 0, 0, err
	}
	mi, err := d.Attribute(AttrComputeCapMinor)
	return ma, mi, err
}

// TotalMem is the device memory in bytes.
func (d Device) TotalMem() (int64, error) {
	v := dl.New[uint64]()
	err := call("cuDeviceTotalMem", fDeviceTotalMem, ptr(v), uintptr(d))
	runtime.KeepAlive(v)
	return int64(*v), err
}

// RetainPrimaryContext retains the device's primary context (the one the CUDA runtime, and
// so PyTorch and NCCL, use). Release it with ReleasePrimaryContext.
func (d Device) RetainPrimaryContext() (Context, error) {
	v := dl.New[uintptr]()
	err := call("cuDevicePrimaryCtxRetain", fPrimaryCtxRetain, ptr(v), uintptr(d))
	runtime.KeepAlive(v)
	if err != nil {
		return 0, fmt.Errorf("device %d: %w", int(d), err)
	}
	return Context(*v), nil
}

// ReleasePrimaryContext releases one retain of the primary context.
func (d Device) ReleasePrimaryContext() error {
	current.Clear() // the context may be reset: every thread sets it again at its next call
	return call("cuDevicePrimaryCtxRelease", fPrimaryCtxRelease, uintptr(d))
}

// Synchronize waits for all work in the context.
func (c Context) Synchronize() error {
	return locked(c, func() error { return call("cuCtxSynchronize", fCtxSynchronize) })
}

// MakeCurrent makes c current on the calling OS thread. Callers that use libraries which
// rely on the current context (cuBLAS, NCCL) lock their goroutine to its thread first.
func (c Context) MakeCurrent() error { return makeCurrent(c) }

// MemAlloc allocates bytes of device memory (uncached; see cuda/memory for the caching
// allocator).
func (c Context) MemAlloc(bytes int) (DevPtr, error) {
	v := dl.New[uintptr]()
	err := locked(c, func() error { return call("cuMemAlloc", fMemAlloc, ptr(v), uintptr(bytes)) })
	runtime.KeepAlive(v)
	if err != nil {
		return 0, fmt.Errorf("%d bytes: %w", bytes, err)
	}
	return DevPtr(*v), nil
}

// MemFree frees device memory from MemAlloc.
func (c Context) MemFree(p DevPtr) error {
	return locked(c, func() error { return call("cuMemFree", fMemFree, uintptr(p)) })
}

// MemInfo returns the free and total device memory in bytes.
func (c Context) MemInfo() (free, total int64, err error) {
	f, t := dl.New[uint64](), dl.New[uint64]()
	err = locked(c, func() error { return call("cuMemGetInfo", fMemGetInfo, ptr(f), ptr(t)) })
	runtime.KeepAlive(f)
	runtime.KeepAlive(t)
	return int64(*f), int64(*t), err
}

// HostAlloc allocates bytes of page-locked (pinned) host memory, which asynchronous copies
// need to overlap with compute. Free it with HostFree.
func (c Context) HostAlloc(bytes int) (unsafe.Pointer, error) {
	v := dl.New[uintptr]()
	err := locked(c, func() error { return call("cuMemHostAlloc", fMemHostAlloc, ptr(v), uintptr(bytes), 0) })
	runtime.KeepAlive(v)
	if err != nil {
		return nil, fmt.Errorf("%d pinned bytes: %w", bytes, err)
	}
	return *(*unsafe.Pointer)(unsafe.Pointer(v)), nil
}

// HostFree frees memory from HostAlloc.
func (c Context) HostFree(p unsafe.Pointer) error {
	return locked(c, func() error { return call("cuMemFreeHost", fMemFreeHost, uintptr(p)) })
}

// CopyHtoD copies bytes from host memory at src to dst, synchronously. Host pointers given
// to this package must be pinned memory (HostAlloc), C memory or Go heap memory (slices made
// with a size known only at run time, or bigger than 64 KiB), never a goroutine's stack.
func (c Context) CopyHtoD(dst DevPtr, src unsafe.Pointer, bytes int) error {
	return locked(c, func() error { return call("cuMemcpyHtoD", fMemcpyHtoD, uintptr(dst), uintptr(src), uintptr(bytes)) })
}

// CopyDtoH copies bytes from device memory src to host memory at dst, synchronously.
func (c Context) CopyDtoH(dst unsafe.Pointer, src DevPtr, bytes int) error {
	return locked(c, func() error { return call("cuMemcpyDtoH", fMemcpyDtoH, uintptr(dst), uintptr(src), uintptr(bytes)) })
}

// CopyDtoD copies bytes between device buffers, synchronously.
func (c Context) CopyDtoD(dst, src DevPtr, bytes int) error {
	return locked(c, func() error { return call("cuMemcpyDtoD", fMemcpyDtoD, uintptr(dst), uintptr(src), uintptr(bytes)) })
}

// CopyHtoDAsync enqueues a copy on s. src must be pinned memory that stays valid until the
// stream has run the copy.
func (c Context) CopyHtoDAsync(dst DevPtr, src unsafe.Pointer, bytes int, s Stream) error {
	return locked(c, func() error {
		return call("cuMemcpyHtoDAsync", fMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(bytes), uintptr(s))
	})
}

// CopyDtoHAsync enqueues a copy on s into pinned host memory.
func (c Context) CopyDtoHAsync(dst unsafe.Pointer, src DevPtr, bytes int, s Stream) error {
	return locked(c, func() error {
		return call("cuMemcpyDtoHAsync", fMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(bytes), uintptr(s))
	})
}

// CopyDtoDAsync enqueues a device-to-device copy on s.
func (c Context) CopyDtoDAsync(dst, src DevPtr, bytes int, s Stream) error {
	return locked(c, func() error {
		return call("cuMemcpyDtoDAsync", fMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(bytes), uintptr(s))
	})
}

// MemsetD32Async sets n 32-bit words at dst to v, on s (v = math.Float32bits(x) for floats).
func (c Context) MemsetD32Async(dst DevPtr, v uint32, n int, s Stream) error {
	return locked(c, func() error {
		return call("cuMemsetD32Async", fMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
	})
}

// StreamCreate creates a non-blocking stream (it does not synchronise with stream 0).
func (c Context) StreamCreate() (Stream, error) {
	v := dl.New[uintptr]()
	err := locked(c, func() error { return call("cuStreamCreate", fStreamCreate, ptr(v), 1) })
	runtime.KeepAlive(v)
	return Stream(*v), err
}

// StreamDestroy destroys s once its work is done.
func (c Context) StreamDestroy(s Stream) error {
	return locked(c, func() error { return call("cuStreamDestroy", fStreamDestroy, uintptr(s)) })
}

// StreamSynchronize blocks until s has run everything enqueued on it.
func (c Context) StreamSynchronize(s Stream) error {
	return locked(c, func() error { return call("cuStreamSynchronize", fStreamSynchronize, uintptr(s)) })
}

// StreamQuery reports whether s is idle. CUDA_ERROR_NOT_READY (600) is (false, nil).
func (c Context) StreamQuery(s Stream) (bool, error) {
	var r int
	err := locked(c, func() error {
		r = dlCall(fStreamQuery, uintptr(s))
		return nil
	})
	if err != nil {
		return false, err
	}
	if r == 600 {
		return false, nil
	}
	return r == 0, result("cuStreamQuery", r)
}

// StreamWaitEvent makes s wait for e (recorded on another stream) without blocking the host.
func (c Context) StreamWaitEvent(s Stream, e Event) error {
	return locked(c, func() error { return call("cuStreamWaitEvent", fStreamWaitEvent, uintptr(s), uintptr(e), 0) })
}

// EventCreate creates an event; timing disables CU_EVENT_DISABLE_TIMING.
func (c Context) EventCreate(timing bool) (Event, error) {
	v := dl.New[uintptr]()
	flags := uintptr(2) // CU_EVENT_DISABLE_TIMING
	if timing {
		flags = 0
	}
	err := locked(c, func() error { return call("cuEventCreate", fEventCreate, ptr(v), flags) })
	runtime.KeepAlive(v)
	return Event(*v), err
}

// EventDestroy destroys e.
func (c Context) EventDestroy(e Event) error {
	return locked(c, func() error { return call("cuEventDestroy", fEventDestroy, uintptr(e)) })
}

// EventRecord records e on s.
func (c Context) EventRecord(e Event, s Stream) error {
	return locked(c, func() error { return call("cuEventRecord", fEventRecord, uintptr(e), uintptr(s)) })
}

// EventQuery reports whether the work before e's record has completed.
func (c Context) EventQuery(e Event) (bool, error) {
	var r int
	_ = locked(c, func() error { r = dlCall(fEventQuery, uintptr(e)); return nil })
	if r == 600 {
		return false, nil
	}
	return r == 0, result("cuEventQuery", r)
}

// EventSynchronize blocks until e has completed.
func (c Context) EventSynchronize(e Event) error {
	return locked(c, func() error { return call("cuEventSynchronize", fEventSynchronize, uintptr(e)) })
}

// EventElapsed returns the milliseconds between two completed timing events.
func (c Context) EventElapsed(start, end Event) (float32, error) {
	v := dl.New[float32]()
	err := locked(c, func() error {
		return call("cuEventElapsedTime", fEventElapsedTime, ptr(v), uintptr(start), uintptr(end))
	})
	runtime.KeepAlive(v)
	return *v, err
}

// LoadPTX JIT-compiles PTX text for the context's device.
func (c Context) LoadPTX(ptx string) (Module, error) {
	img := append([]byte(ptx), 0)
	v := dl.New[uintptr]()
	err := locked(c, func() error {
		return call("cuModuleLoadData", fModuleLoadData, ptr(v), uintptr(unsafe.Pointer(&img[0])))
	})
	runtime.KeepAlive(img)
	runtime.KeepAlive(v)
	return Module(*v), err
}

// Unload unloads the module.
func (c Context) Unload(m Module) error {
	return locked(c, func() error { return call("cuModuleUnload", fModuleUnload, uintptr(m)) })
}

// Function looks a kernel up by its (extern "C") name.
func (c Context) Function(m Module, name string) (Function, error) {
	cs := append([]byte(name), 0)
	v := dl.New[uintptr]()
	err := locked(c, func() error {
		return call("cuModuleGetFunction", fModuleGetFunction, ptr(v), uintptr(m), uintptr(unsafe.Pointer(&cs[0])))
	})
	runtime.KeepAlive(cs)
	runtime.KeepAlive(v)
	if err != nil {
		return 0, fmt.Errorf("kernel %s: %w", name, err)
	}
	return Function(*v), nil
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Launch enqueues f on s. Each argument is one 8-byte slot built with ArgPtr, ArgF32, ArgI32
// or ArgI64; a 4-byte kernel parameter reads the low half of its slot.
func (c Context) Launch(f Function, grid, block Dim3, sharedBytes int, s Stream, args ...uint64) error {
	slots := make([]uint64, len(args))
	copy(slots, args)
	params := make([]uintptr, len(args)+1)
	for i := range slots {
		params[i] = uintptr(unsafe.Pointer(&slots[i]))
	}
	err := locked(c, func() error {
		return call("cuLaunchKernel", fLaunchKernel, uintptr(f), uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
			uintptr(block.X), uintptr(block.Y), uintptr(block.Z), uintptr(sharedBytes), uintptr(s),
			uintptr(unsafe.Pointer(&params[0])), 0)
	})
	runtime.KeepAlive(slots)
	runtime.KeepAlive(params)
	return err
}

// ArgPtr is a device-pointer kernel argument.
func ArgPtr(p DevPtr) uint64 { return uint64(p) }

// ArgF32 is a float kernel argument.
func ArgF32(f float32) uint64 { return uint64(math.Float32bits(f)) }

// ArgI32 is an int kernel argument.
func ArgI32(i int) uint64 { return uint64(uint32(int32(i))) }

// ArgI64 is a long long kernel argument.
func ArgI64(i int64) uint64 { return uint64(i) }

func dlCall(i int, args ...uintptr) int { return dlCallImpl(fn[i], args...) }
