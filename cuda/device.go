package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/cublas"
	"github.com/gorgonia-parallel/gp/cuda/cudnn"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/kernels"
	"github.com/gorgonia-parallel/gp/cuda/memory"
)

// Device is one GPU with its context, stream, allocators, cuBLAS handle and kernels. Its
// methods may be called from any goroutine, but operations are enqueued in call order on one
// stream, so callers issue a step's operations from one goroutine.
type Device struct {
	ordinal int
	dev     driver.Device
	ctx     driver.Context
	stream  driver.Stream
	mem     *memory.Cache
	pinned  *memory.Cache
	blas    cublas.Handle
	hasBLAS bool
	dnn     cudnn.Handle
	hasDNN  bool
	dnnErr  error // why cuDNN is not used, when it is not
	conv    ConvImpl
	convMu  sync.Mutex
	convs   map[cudnn.ConvSpec]*cudnn.Conv
	mod     driver.Module
	fns     map[string]driver.Function
	ptx     string // where the kernels' PTX came from (kernels.Module.Origin)
	sms     int
	name    string
}

// Option configures Open.
type Option func(*options)

type options struct{ blas, dnn, requireDNN bool }

// RequireCuDNNEnv, set to 1, makes Open require cuDNN as RequireCuDNN does: a GPU check
// (cuda/gpucheck's run.sh) sets it so that a cuDNN that does not load fails the run instead
// of every convolution quietly running through im2col.
const RequireCuDNNEnv = "GP_REQUIRE_CUDNN"

// WithoutBLAS opens the device without cuBLAS (GEMM then fails): for machines with the
// driver but no cuBLAS.
func WithoutBLAS() Option { return func(o *options) { o.blas = false } }

// WithoutCuDNN opens the device without cuDNN: convolutions then use im2col and cuBLAS.
func WithoutCuDNN() Option { return func(o *options) { o.dnn = false } }

// RequireCuDNN makes Open fail, naming the library and why, when cuDNN does not load, instead
// of falling back to im2col.
func RequireCuDNN() Option { return func(o *options) { o.requireDNN = true } }

// Open opens device ordinal: retains its primary context, creates the stream, loads the
// kernels (JIT from PTX), unless WithoutBLAS cuBLAS, and unless WithoutCuDNN cuDNN when it
// can be loaded (otherwise convolutions use im2col; ConvImplInUse says which, and why; with
// RequireCuDNN or $GP_REQUIRE_CUDNN=1, Open fails instead). The kernels come from
// kernels.Load: the embedded PTX, or the file $GP_CUDA_PTX names.
func Open(ordinal int, opts ...Option) (*Device, error) {
	o := options{blas: true, dnn: true, requireDNN: os.Getenv(RequireCuDNNEnv) == "1"}
	for _, f := range opts {
		f(&o)
	}
	fail := func(err error) (*Device, error) { return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err) }
	if o.requireDNN && (!o.dnn || !o.blas) {
		return fail(fmt.Errorf("cuDNN is required (RequireCuDNN or %s=1) but the device is opened WithoutCuDNN or WithoutBLAS: drop one or the other", RequireCuDNNEnv))
	}
	if err := driver.Load(); err != nil {
		return nil, err
	}
	dev, err := driver.GetDevice(ordinal)
	if err != nil {
		return fail(err)
	}
	d := &Device{ordinal: ordinal, dev: dev, fns: map[string]driver.Function{}, convs: map[cudnn.ConvSpec]*cudnn.Conv{}}
	d.name, _ = dev.Name()
	d.sms, _ = dev.Attribute(driver.AttrMultiprocessorCount)
	if d.ctx, err = dev.RetainPrimaryContext(); err != nil {
		return fail(err)
	}
	if err := d.init(o); err != nil {
		_ = d.Close()
		return fail(err)
	}
	return d, nil
}

func (d *Device) init(o options) error {
	var err error
	if d.stream, err = d.ctx.StreamCreate(); err != nil {
		return err
	}
	d.mem = memory.New(devBackend{d.ctx}, memory.WithName(fmt.Sprintf("cuda:%d", d.ordinal)))
	d.pinned = memory.New(pinnedBackend{d.ctx}, memory.WithName(fmt.Sprintf("cuda:%d pinned", d.ordinal)))
	km, err := kernels.Load()
	if err != nil {
		return err
	}
	if d.mod, err = d.ctx.LoadPTX(km.PTX); err != nil {
		return fmt.Errorf("loading the kernels' PTX (%s): %w", km.Origin, err)
	}
	for _, n := range km.Kernels {
		f, err := d.ctx.Function(d.mod, n)
		if err != nil {
			return fmt.Errorf("kernel %s of %s: %w", n, km.Origin, err)
		}
		d.fns[n] = f
	}
	d.ptx = km.Origin
	if !o.blas {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.ctx.MakeCurrent(); err != nil {
		return err
	}
	if d.blas, err = cublas.Create(); err != nil {
		return err
	}
	d.hasBLAS = true
	if err := d.blas.SetStream(uintptr(d.stream)); err != nil {
		return err
	}
	if !o.dnn {
		d.dnnErr = fmt.Errorf("cuda: device %d opened WithoutCuDNN", d.ordinal)
		return nil
	}
	// cuDNN is optional: without it convolutions use im2col (ConvImplInUse says why).
	d.dnnErr = cudnn.Load()
	if d.dnnErr == nil {
		d.dnn, d.dnnErr = cudnn.Create()
		if d.dnnErr == nil {
			if d.dnnErr = d.dnn.SetStream(uintptr(d.stream)); d.dnnErr != nil {
				_ = d.dnn.Destroy()
			}
		}
	}
	d.hasDNN = d.dnnErr == nil
	if o.requireDNN && !d.hasDNN {
		return fmt.Errorf("cuDNN is required (RequireCuDNN or %s=1) and did not load, so convolutions would fall back to im2col: %w", RequireCuDNNEnv, d.dnnErr)
	}
	return nil
}

// Close waits for the device's work and releases everything Open made.
func (d *Device) Close() error {
	var errs []error
	if d.stream != 0 {
		errs = append(errs, d.ctx.StreamSynchronize(d.stream))
	}
	if d.hasBLAS {
		errs = append(errs, d.withContext(d.blas.Destroy))
	}
	for k, c := range d.convs {
		c.Destroy()
		delete(d.convs, k)
	}
	if d.hasDNN {
		errs = append(errs, d.withContext(d.dnn.Destroy))
	}
	if d.mem != nil {
		errs = append(errs, d.mem.Close(), d.pinned.Close())
	}
	if d.mod != 0 {
		errs = append(errs, d.ctx.Unload(d.mod))
	}
	if d.stream != 0 {
		errs = append(errs, d.ctx.StreamDestroy(d.stream))
	}
	errs = append(errs, d.dev.ReleasePrimaryContext())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cuda: device %d: close: %w", d.ordinal, err)
	}
	return nil
}

// Name is the GPU's name, e.g. "NVIDIA H200".
func (d *Device) Name() string { return d.name }

// Ordinal is the device number.
func (d *Device) Ordinal() int { return d.ordinal }

// Context is the device's (primary) CUDA context.
func (d *Device) Context() driver.Context { return d.ctx }

// Stream is the stream every operation of the device is enqueued on.
func (d *Device) Stream() driver.Stream { return d.stream }

// MemoryStats reports the device allocator's counters.
func (d *Device) MemoryStats() memory.Stats { return d.mem.Stats() }

// ResetPeakMemory starts MemoryStats' PeakInUse afresh from the bytes in use now.
func (d *Device) ResetPeakMemory() { d.mem.ResetPeak() }

// Synchronize waits until the device's stream has run everything enqueued, or ctx ends (the
// work then still completes in the background).
func (d *Device) Synchronize(ctx context.Context) error {
	sleep := time.Microsecond
	for {
		ok, err := d.ctx.StreamQuery(d.stream)
		if err != nil {
			return fmt.Errorf("cuda: device %d: %w", d.ordinal, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cuda: device %d: synchronize: %w", d.ordinal, ctx.Err())
		case <-time.After(sleep):
		}
		sleep = min(2*sleep, 100*time.Microsecond)
	}
}

// Kernel reports whether kernel name of kernels.cu is loaded: nil, or an error naming the
// kernel and the PTX it was looked up in. Executors check the kernels their operations
// launch when they compile, not at the first launch.
func (d *Device) Kernel(name string) error {
	if _, ok := d.fns[name]; ok {
		return nil
	}
	return fmt.Errorf("cuda: device %d: no kernel %s in the PTX (%s)", d.ordinal, name, d.ptx)
}

// KernelsPTX says where the kernels this device loaded came from: the file $GP_CUDA_PTX
// named, or kernels.Embedded.
func (d *Device) KernelsPTX() string { return d.ptx }

// launch enqueues kernel name over n elements (grid-stride kernels).
func (d *Device) launch(name string, n int, args ...uint64) error {
	const block = 256
	grid := (n + block - 1) / block
	grid = max(1, min(grid, max(d.sms, 1)*32))
	return d.launchGrid(name, driver.Dim3{X: uint32(grid), Y: 1, Z: 1}, block, 0, args...)
}

// launchRows enqueues a one-block-per-row kernel with its shared reduction buffer.
func (d *Device) launchRows(name string, rows int, args ...uint64) error {
	const block = 256
	return d.launchGrid(name, driver.Dim3{X: uint32(rows), Y: 1, Z: 1}, block, block*4, args...)
}

func (d *Device) launchGrid(name string, grid driver.Dim3, block, shared int, args ...uint64) error {
	f, ok := d.fns[name]
	if !ok {
		return d.Kernel(name)
	}
	if grid.X == 0 {
		return nil
	}
	if err := d.ctx.Launch(f, grid, driver.Dim3{X: uint32(block), Y: 1, Z: 1}, shared, d.stream, args...); err != nil {
		return fmt.Errorf("cuda: device %d: %s: %w", d.ordinal, name, err)
	}
	return nil
}

type devBackend struct{ c driver.Context }

func (b devBackend) Alloc(n int) (uintptr, error) {
	p, err := b.c.MemAlloc(n)
	return uintptr(p), err
}
func (b devBackend) Free(p uintptr) error { return b.c.MemFree(driver.DevPtr(p)) }

type pinnedBackend struct{ c driver.Context }

func (b pinnedBackend) Alloc(n int) (uintptr, error) {
	p, err := b.c.HostAlloc(n)
	return uintptr(p), err
}

func (b pinnedBackend) Free(p uintptr) error {
	return b.c.HostFree(*(*unsafe.Pointer)(unsafe.Pointer(&p)))
}

// withContext runs f on a locked OS thread with the device's context current: cuBLAS (like
// every CUDA-runtime library) works on the calling thread's current context.
func (d *Device) withContext(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.ctx.MakeCurrent(); err != nil {
		return fmt.Errorf("cuda: device %d: %w", d.ordinal, err)
	}
	return f()
}
