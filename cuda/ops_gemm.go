package cuda

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// MatMul computes c = alpha·op(a)·op(b) + beta·c for row-major 2-D tensors: op(a) is m×k,
// op(b) is k×n, c is m×n float32. a and b are float32 (cublasSgemm, full float32 as
// PyTorch's default with TF32 off) or both float16/bfloat16 (cublasGemmEx with float32
// accumulation and output).
func (d *Device) MatMul(c, a, b *Tensor, transA, transB bool, alpha, beta float32) error {
	if !d.hasBLAS {
		return fmt.Errorf("cuda: device %d: matmul: opened without cuBLAS", d.ordinal)
	}
	if len(a.shape) != 2 || len(b.shape) != 2 || len(c.shape) != 2 || a.dtype != b.dtype || c.dtype != Float32 {
		return fmt.Errorf("cuda: device %d: matmul: a %v %v, b %v %v, c %v %v", d.ordinal, a.dtype, a.shape, b.dtype, b.shape, c.dtype, c.shape)
	}
	m, k := a.shape[0], a.shape[1]
	if transA {
		m, k = k, m
	}
	kb, n := b.shape[0], b.shape[1]
	if transB {
		kb, n = n, kb
	}
	if k != kb || c.shape[0] != m || c.shape[1] != n {
		return fmt.Errorf("cuda: device %d: matmul: shapes %v (t=%v) x %v (t=%v) -> %v", d.ordinal, a.shape, transA, b.shape, transB, c.shape)
	}
	err := d.withContext(func() error {
		if a.dtype == Float32 {
			return d.blas.Gemm(transA, transB, m, n, k, alpha, uintptr(a.Ptr()), uintptr(b.Ptr()), beta, uintptr(c.Ptr()))
		}
		return d.blas.GemmEx(transA, transB, m, n, k, alpha, uintptr(a.Ptr()), uintptr(b.Ptr()), a.dtype.blas(), beta, uintptr(c.Ptr()), c.dtype.blas())
	})
	if err != nil {
		return fmt.Errorf("cuda: device %d: matmul: %w", d.ordinal, err)
	}
	return nil
}

// MatMulAutocast is autocast's matmul: a and b (float32) are cast to format f on the device
// and multiplied with float32 accumulation into c.
func (d *Device) MatMulAutocast(c, a, b *Tensor, transA, transB bool, f Format) error {
	dt := BFloat16
	if f == FP16 {
		dt = Float16
	}
	a16, err := d.Alloc(dt, a.shape...)
	if err != nil {
		return err
	}
	defer a16.Free()
	b16, err := d.Alloc(dt, b.shape...)
	if err != nil {
		return err
	}
	defer b16.Free()
	if err := d.Cast(a16, a); err != nil {
		return err
	}
	if err := d.Cast(b16, b); err != nil {
		return err
	}
	return d.MatMul(c, a16, b16, transA, transB, 1, 0)
}

// RoundCast rounds float32 x to nearest even in the 16-bit type of h (Float16 or BFloat16)
// and stores the result twice, in one pass: in h, and widened back to float32 in y (which
// may be x). It is autocast's cast of a value that both 16-bit GEMMs (reading h) and float32
// ops (reading y, bit-equal to Round's output) read. x, y and h have the same length.
func (d *Device) RoundCast(y, h, x *Tensor) error {
	if y == nil || h == nil || x == nil || y.d != d || h.d != d || x.d != d || y.n != x.n || h.n != x.n ||
		x.dtype != Float32 || y.dtype != Float32 {
		return fmt.Errorf("cuda: device %d: round-cast: want float32 x and y and a 16-bit h of one length", d.ordinal)
	}
	var name string
	switch h.dtype {
	case BFloat16:
		name = "round_cast_f32_bf16"
	case Float16:
		name = "round_cast_f32_f16"
	default:
		return fmt.Errorf("cuda: device %d: round-cast to %v: want float16 or bfloat16", d.ordinal, h.dtype)
	}
	return d.launch(name, x.n, ptr(y), ptr(h), ptr(x), driver.ArgI64(int64(x.n)))
}
