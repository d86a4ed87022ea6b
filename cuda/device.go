package cuda

import (
	"context"
	"errors"
	"fmt"
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
	missing map[string]error // pending kernels (kernels.Pending) the driver did not find
	sms     int
	name    string
}

// Option configures Open.
type Option func(*options)

type options struct{ blas, dnn bool }

// WithoutBLAS opens the device without cuBLAS (GEMM then fails): for machines with the
// driver but no cuBLAS.
func WithoutBLAS() Option { return func(o *options) { o.blas = false } }

// WithoutCuDNN opens the device without cuDNN: convolutions then use im2col and cuBLAS.
func WithoutCuDNN() Option { return func(o *options) { o.dnn = false } }

// Open opens device ordinal: retains its primary context, creates the stream, loads the
// kernels (JIT from PTX), unless WithoutBLAS cuBLAS, and unless WithoutCuDNN cuDNN when it
// can be loaded (otherwise convolutions use im2col; ConvImplInUse says which, and why).
func Open(ordinal int, opts ...Option) (*Device, error) {
	o := options{blas: true, dnn: true}
	for _, f := range opts {
		f(&o)
	}
	fail := func(err error) (*Device, error) { return nil, fmt.Errorf("cuda: device %d: %w", ordinal, err) }
	if err := driver.Load(); err != nil {
		return nil, err
	}
	dev, err := driver.GetDevice(ordinal)
	if err != nil {
		return fail(err)
	}
	d := &Device{ordinal: ordinal, dev: dev, fns: map[string]driver.Function{}, missing: map[string]error{}, convs: map[cudnn.ConvSpec]*cudnn.Conv{}}
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
	if d.mod, err = d.ctx.LoadPTX(kernels.PTX); err != nil {
		return fmt.Errorf("loading kernels PTX: %w", err)
	}
	for _, n := range kernels.Names() {
		f, err := d.ctx.Function(d.mod, n)
		if err != nil {
			return err
		}
		d.fns[n] = f
	}
	for _, n := range kernels.Pending {
		if f, err := d.ctx.Function(d.mod, n); err == nil {
			d.fns[n] = f
		} else {
			d.missing[n] = err
		}
	}
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

// Kernel reports whether kernel name of kernels.cu is loaded: nil, or an error that says why
// not (a pending kernel whose PTX has not been generated yet names the command to run).
// Executors check the kernels their operations launch when they compile, not at the first
// launch.
func (d *Device) Kernel(name string) error {
	if _, ok := d.fns[name]; ok {
		return nil
	}
	if err, ok := d.missing[name]; ok {
		return fmt.Errorf("cuda: device %d: kernel %s is in kernels.cu but not in the committed PTX (%v): regenerate it with `go generate ./cuda/kernels` on a machine with nvcc", d.ordinal, name, err)
	}
	return fmt.Errorf("cuda: device %d: no kernel %s in the PTX", d.ordinal, name)
}

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
