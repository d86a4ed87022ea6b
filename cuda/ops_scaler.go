package cuda

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// The reductions a training step runs over the flat gradient buffer between backward and
// the optimizer (amp.GradScaler's unscale and inf check, clip_grad_norm_'s norm): each
// leaves one scalar to read on the host.

// UnscaleNonFinite multiplies x (float32) by inv in place and returns the number of the
// products that are inf or NaN, in one pass over x: GradScaler's unscale_ with its
// found_inf (amp.GradScaler.Unscale). It waits for the device.
func (d *Device) UnscaleNonFinite(ctx context.Context, x *Tensor, inv float32) (int, error) {
	if err := d.check("unscale", Float32, x); err != nil {
		return 0, err
	}
	cnt, err := d.Alloc(Float32, 1) // one 32-bit counter
	if err != nil {
		return 0, fmt.Errorf("cuda: device %d: unscale: counter: %w", d.ordinal, err)
	}
	defer cnt.Free()
	if err := d.ctx.MemsetD32Async(cnt.Ptr(), 0, 1, d.stream); err != nil {
		return 0, fmt.Errorf("cuda: device %d: unscale: zeroing the counter: %w", d.ordinal, err)
	}
	if err := d.launch("unscale_nonfinite_f32", x.n, ptr(cnt), ptr(x), driver.ArgF32(inv), driver.ArgI64(int64(x.n))); err != nil {
		return 0, err
	}
	v, err := cnt.ToHost(ctx)
	if err != nil {
		return 0, fmt.Errorf("cuda: device %d: unscale: reading the count: %w", d.ordinal, err)
	}
	return int(*(*uint32)(unsafe.Pointer(&v[0]))), nil
}

// SumSquares returns Σ x[i]² of x (float32), accumulated in float64 on the device (each
// block's share, then the blocks' sums in order: the same value for the same x on the same
// device). An inf or NaN in x makes it inf or NaN. It waits for the device.
func (d *Device) SumSquares(ctx context.Context, x *Tensor) (float64, error) {
	if err := d.check("sum of squares", Float32, x); err != nil {
		return 0, err
	}
	const block = 256
	grid := max(1, min((x.n+block-1)/block, max(d.sms, 1)*4))
	part, err := d.Alloc(Float32, 2*grid+2) // grid float64 partial sums and the total
	if err != nil {
		return 0, fmt.Errorf("cuda: device %d: sum of squares: partial sums: %w", d.ordinal, err)
	}
	defer part.Free()
	total, err := part.View(2*grid, 2)
	if err != nil {
		return 0, err
	}
	if x.n > 0 {
		if err := d.launchGrid("sumsq_part_f32", driver.Dim3{X: uint32(grid), Y: 1, Z: 1}, block, block*8,
			ptr(part), ptr(x), driver.ArgI64(int64(x.n))); err != nil {
			return 0, err
		}
	} else if err := d.Zero(part); err != nil {
		return 0, err
	}
	if err := d.launchGrid("sum_f64_serial", driver.Dim3{X: 1, Y: 1, Z: 1}, 1, 0,
		ptr(total), ptr(part), driver.ArgI32(grid)); err != nil {
		return 0, err
	}
	v, err := total.ToHost(ctx)
	if err != nil {
		return 0, fmt.Errorf("cuda: device %d: sum of squares: reading the total: %w", d.ordinal, err)
	}
	return *(*float64)(unsafe.Pointer(&v[0])), nil
}
