package cuda

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// Elementwise operations. Every tensor argument is float32 with the same number of elements
// unless said otherwise; outputs may alias inputs.

// Format is an autocast 16-bit format.
type Format uint8

// Autocast formats, as amp.BF16 and amp.FP16.
const (
	BF16 Format = iota
	FP16
)

func (d *Device) check(op string, dtype DType, ts ...*Tensor) error {
	for _, t := range ts {
		if t == nil || t.d != d {
			return fmt.Errorf("cuda: device %d: %s: tensor of another device or nil", d.ordinal, op)
		}
		if t.dtype != dtype || t.n != ts[0].n {
			return fmt.Errorf("cuda: device %d: %s: got %v %v, want %v with %d elements", d.ordinal, op, t.dtype, t.shape, dtype, ts[0].n)
		}
	}
	return nil
}

func ptr(t *Tensor) uint64 { return driver.ArgPtr(t.Ptr()) }

func (d *Device) binary(name string, y, a, b *Tensor) error {
	if err := d.check(name, Float32, y, a, b); err != nil {
		return err
	}
	return d.launch(name, y.n, ptr(y), ptr(a), ptr(b), driver.ArgI64(int64(y.n)))
}

func (d *Device) unary(name string, y, x *Tensor) error {
	if err := d.check(name, Float32, y, x); err != nil {
		return err
	}
	return d.launch(name, y.n, ptr(y), ptr(x), driver.ArgI64(int64(y.n)))
}

// Fill sets every element of y to v.
func (d *Device) Fill(y *Tensor, v float32) error {
	if err := d.check("fill", Float32, y); err != nil {
		return err
	}
	return d.launch("fill_f32", y.n, ptr(y), driver.ArgF32(v), driver.ArgI64(int64(y.n)))
}

// Add computes y = a + b.
func (d *Device) Add(y, a, b *Tensor) error { return d.binary("add_f32", y, a, b) }

// Sub computes y = a - b.
func (d *Device) Sub(y, a, b *Tensor) error { return d.binary("sub_f32", y, a, b) }

// Mul computes y = a * b elementwise.
func (d *Device) Mul(y, a, b *Tensor) error { return d.binary("mul_f32", y, a, b) }

// Scale computes y = a * x.
func (d *Device) Scale(y, x *Tensor, a float32) error {
	if err := d.check("scale", Float32, y, x); err != nil {
		return err
	}
	return d.launch("scale_f32", y.n, ptr(y), ptr(x), driver.ArgF32(a), driver.ArgI64(int64(y.n)))
}

// Axpby computes y = alpha*x + beta*y (SGD's update, gradient accumulation).
func (d *Device) Axpby(y, x *Tensor, alpha, beta float32) error {
	if err := d.check("axpby", Float32, y, x); err != nil {
		return err
	}
	return d.launch("axpby_f32", y.n, ptr(y), ptr(x), driver.ArgF32(alpha), driver.ArgF32(beta), driver.ArgI64(int64(y.n)))
}

// ReLU computes y = max(x, 0).
func (d *Device) ReLU(y, x *Tensor) error { return d.unary("relu_f32", y, x) }

// ReLUBackward computes dx = dy where x > 0, else 0.
func (d *Device) ReLUBackward(dx, dy, x *Tensor) error { return d.binary("relu_bwd_f32", dx, dy, x) }

// GELU computes the exact (erf) GELU, torch.nn.GELU()'s default.
func (d *Device) GELU(y, x *Tensor) error { return d.unary("gelu_f32", y, x) }

// GELUBackward computes dx = dy * GELU'(x).
func (d *Device) GELUBackward(dx, dy, x *Tensor) error { return d.binary("gelu_bwd_f32", dx, dy, x) }

// Round rounds float32 x to format f (nearest even, overflow to inf) and stores the result as
// float32 in y: the device version of amp.RoundSlice32.
func (d *Device) Round(y, x *Tensor, f Format) error {
	if f == FP16 {
		return d.unary("round_f16_f32", y, x)
	}
	return d.unary("round_bf16_f32", y, x)
}

// Cast converts between float32 and a 16-bit type (either direction), rounding to nearest
// even. y and x have the same number of elements.
func (d *Device) Cast(y, x *Tensor) error {
	if y == nil || x == nil || y.n != x.n || y.d != d || x.d != d {
		return fmt.Errorf("cuda: device %d: cast: mismatched tensors", d.ordinal)
	}
	var name string
	switch {
	case x.dtype == Float32 && y.dtype == Float16:
		name = "cast_f32_f16"
	case x.dtype == Float32 && y.dtype == BFloat16:
		name = "cast_f32_bf16"
	case x.dtype == Float16 && y.dtype == Float32:
		name = "cast_f16_f32"
	case x.dtype == BFloat16 && y.dtype == Float32:
		name = "cast_bf16_f32"
	case x.dtype == y.dtype:
		return d.ctx.CopyDtoDAsync(y.Ptr(), x.Ptr(), x.n*x.dtype.Size(), d.stream)
	default:
		return fmt.Errorf("cuda: device %d: cast %v to %v: unsupported", d.ordinal, x.dtype, y.dtype)
	}
	return d.launch(name, y.n, ptr(y), ptr(x), driver.ArgI64(int64(y.n)))
}

// NonFinite returns the number of inf and NaN elements of x (GradScaler's found_inf). It
// waits for the device.
func (d *Device) NonFinite(ctx context.Context, x *Tensor) (int, error) {
	if err := d.check("nonfinite", Float32, x); err != nil {
		return 0, err
	}
	cnt, err := d.Alloc(Float32, 1) // one 32-bit counter
	if err != nil {
		return 0, err
	}
	defer cnt.Free()
	if err := d.ctx.MemsetD32Async(cnt.Ptr(), 0, 1, d.stream); err != nil {
		return 0, err
	}
	if err := d.launch("nonfinite_count_f32", x.n, ptr(cnt), ptr(x), driver.ArgI64(int64(x.n))); err != nil {
		return 0, err
	}
	v, err := cnt.ToHost(ctx)
	if err != nil {
		return 0, err
	}
	return int(*(*uint32)(unsafe.Pointer(&v[0]))), nil
}
