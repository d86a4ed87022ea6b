package cuda

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/cublas"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/memory"
)

// DType is the element type of a Tensor.
type DType uint8

// Element types.
const (
	Float32 DType = iota + 1
	Float16
	BFloat16
	// Int32 holds labels and pooling indices.
	Int32
)

// Size is the element size in bytes.
func (t DType) Size() int {
	if t == Float32 || t == Int32 {
		return 4
	}
	return 2
}

// String returns "float32", "float16" or "bfloat16".
func (t DType) String() string {
	switch t {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	case Int32:
		return "int32"
	}
	return fmt.Sprintf("dtype(%d)", uint8(t))
}

func (t DType) blas() cublas.DataType {
	switch t {
	case Float16:
		return cublas.R16F
	case BFloat16:
		return cublas.R16BF
	}
	return cublas.R32F
}

// Tensor is a contiguous array in device memory.
type Tensor struct {
	d     *Device
	blk   memory.Block
	shape []int
	dtype DType
	n     int
	view  bool // shares another tensor's memory: Free does nothing
}

// Alloc allocates an uninitialised tensor.
func (d *Device) Alloc(dtype DType, shape ...int) (*Tensor, error) {
	n := 1
	for _, s := range shape {
		if s < 0 {
			return nil, fmt.Errorf("cuda: device %d: alloc: negative dimension in %v", d.ordinal, shape)
		}
		n *= s
	}
	blk, err := d.mem.Alloc(n * dtype.Size())
	if err != nil {
		return nil, err
	}
	return &Tensor{d: d, blk: blk, shape: append([]int(nil), shape...), dtype: dtype, n: n}, nil
}

// FromHost copies float32 host data into a new float32 tensor of the given shape (len(data)
// must equal the shape's size).
func (d *Device) FromHost(data []float32, shape ...int) (*Tensor, error) {
	t, err := d.Alloc(Float32, shape...)
	if err != nil {
		return nil, err
	}
	if t.n != len(data) {
		t.Free()
		return nil, fmt.Errorf("cuda: FromHost: %d values for shape %v", len(data), shape)
	}
	if err := t.CopyFrom(data); err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}

// FromHostInt32 copies int32 host data (class labels) into a new Int32 tensor.
func (d *Device) FromHostInt32(data []int32, shape ...int) (*Tensor, error) {
	t, err := d.Alloc(Int32, shape...)
	if err != nil {
		return nil, err
	}
	if t.n != len(data) {
		t.Free()
		return nil, fmt.Errorf("cuda: FromHostInt32: %d values for shape %v", len(data), shape)
	}
	if err := t.copyIn(unsafe.Pointer(unsafe.SliceData(data))); err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}

// CopyFrom copies host data into the float32 tensor through pinned memory, in stream order,
// and waits for the copy.
func (t *Tensor) CopyFrom(data []float32) error {
	if t.dtype != Float32 || len(data) != t.n {
		return fmt.Errorf("cuda: CopyFrom: %d float32 into %v %v", len(data), t.dtype, t.shape)
	}
	return t.copyIn(unsafe.Pointer(unsafe.SliceData(data)))
}

// copyIn copies t's size in bytes from host memory at src (4-byte elements) through pinned
// memory, in stream order, and waits for the copy.
func (t *Tensor) copyIn(src unsafe.Pointer) error {
	if t.n == 0 {
		return nil
	}
	d := t.d
	pin, err := d.pinned.Alloc(4 * t.n)
	if err != nil {
		return err
	}
	defer d.pinned.Free(pin)
	copy(pinnedF32(pin, t.n), unsafe.Slice((*float32)(src), t.n))
	if err := d.ctx.CopyHtoDAsync(t.Ptr(), pinnedPtr(pin), 4*t.n, d.stream); err != nil {
		return fmt.Errorf("cuda: device %d: %w", d.ordinal, err)
	}
	return d.ctx.StreamSynchronize(d.stream)
}

// ToHost waits for the work enqueued so far and returns the tensor's values as float32
// (16-bit tensors are converted on the device first).
func (t *Tensor) ToHost(ctx context.Context) ([]float32, error) {
	out := make([]float32, t.n)
	if err := t.CopyTo(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CopyTo is ToHost into dst, which has the tensor's number of elements.
func (t *Tensor) CopyTo(ctx context.Context, dst []float32) error {
	if len(dst) != t.n {
		return fmt.Errorf("cuda: CopyTo: %v %v into %d float32", t.dtype, t.shape, len(dst))
	}
	src := t
	if t.dtype != Float32 {
		f, err := t.d.Alloc(Float32, t.shape...)
		if err != nil {
			return err
		}
		defer f.Free()
		if err := t.d.Cast(f, t); err != nil {
			return err
		}
		src = f
	}
	d := t.d
	if t.n == 0 {
		return nil
	}
	pin, err := d.pinned.Alloc(4 * t.n)
	if err != nil {
		return err
	}
	defer d.pinned.Free(pin)
	if err := d.ctx.CopyDtoHAsync(pinnedPtr(pin), src.Ptr(), 4*t.n, d.stream); err != nil {
		return fmt.Errorf("cuda: device %d: %w", d.ordinal, err)
	}
	if err := d.Synchronize(ctx); err != nil {
		return err
	}
	copy(dst, pinnedF32(pin, t.n))
	return nil
}

// View returns a tensor of the given shape over t's elements from offset on (a reshape
// when offset is 0 and the shape has t's size; a slice otherwise). It shares t's memory, is
// valid while t is, and its Free does nothing.
func (t *Tensor) View(offset int, shape ...int) (*Tensor, error) {
	n := 1
	for _, s := range shape {
		if s < 0 {
			return nil, fmt.Errorf("cuda: view: negative dimension in %v", shape)
		}
		n *= s
	}
	if offset < 0 || offset+n > t.n {
		return nil, fmt.Errorf("cuda: view %v at offset %d of a %v tensor %v: out of range", shape, offset, t.dtype, t.shape)
	}
	blk := t.blk
	blk.Ptr += uintptr(offset * t.dtype.Size())
	blk.Size = n * t.dtype.Size()
	return &Tensor{d: t.d, blk: blk, shape: append([]int(nil), shape...), dtype: t.dtype, n: n, view: true}, nil
}

// Free returns the tensor's memory to the device's cache. Work already enqueued that reads
// it still runs correctly (stream order). It does nothing for a View.
func (t *Tensor) Free() {
	if t != nil && !t.view && t.blk.Ptr != 0 {
		_ = t.d.mem.Free(t.blk)
		t.blk = memory.Block{}
	}
}

// Ptr is the device address.
func (t *Tensor) Ptr() driver.DevPtr { return driver.DevPtr(t.blk.Ptr) }

// Len is the number of elements.
func (t *Tensor) Len() int { return t.n }

// Shape is the tensor's shape (do not modify).
func (t *Tensor) Shape() []int { return t.shape }

// DType is the element type.
func (t *Tensor) DType() DType { return t.dtype }

func pinnedPtr(b memory.Block) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&b.Ptr)) }

func pinnedF32(b memory.Block, n int) []float32 { return unsafe.Slice((*float32)(pinnedPtr(b)), n) }
