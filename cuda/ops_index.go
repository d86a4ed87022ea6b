package cuda

import (
	"fmt"
	"slices"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// Indexing, layout and broadcasting operations, float32, and the batched GEMM of attention.
// Together with the row-wise ops they make a transformer's layers (Swin's window partition,
// shifted windows, relative-position bias and multi-head attention) on the device.

// GatherRows sets row i of y to row idx[i] of x, viewing x and y as rows of rowLen elements,
// and zeros it where idx[i] is negative or past x's last row: padding, cyclic shift and
// window partition in one pass. idx is Int32 with one entry per row of y.
func (d *Device) GatherRows(y, x, idx *Tensor, rowLen int) error {
	if err := d.checkRows("gather rows", y, x, idx, rowLen); err != nil {
		return err
	}
	return d.launch("gather_rows_f32", y.n, ptr(y), ptr(x), ptr(idx), driver.ArgI64(int64(idx.n)), driver.ArgI32(rowLen),
		driver.ArgI64(int64(x.n/rowLen)))
}

// ScatterAddRows adds row i of dy into row idx[i] of dx (negative entries are skipped): the
// adjoint of GatherRows (dy has one row per entry of idx). dx is not cleared first. Entries
// that repeat add in an unspecified order (atomics), as torch's index_add on a GPU.
func (d *Device) ScatterAddRows(dx, dy, idx *Tensor, rowLen int) error {
	if err := d.checkRows("scatter-add rows", dy, dx, idx, rowLen); err != nil {
		return err
	}
	return d.launch("scatter_add_rows_f32", dy.n, ptr(dx), ptr(dy), ptr(idx), driver.ArgI64(int64(idx.n)), driver.ArgI32(rowLen),
		driver.ArgI64(int64(dx.n/rowLen)))
}

// checkRows checks a gather's gathered tensor g (one row per index), the indexed tensor x
// and the index.
func (d *Device) checkRows(op string, g, x, idx *Tensor, rowLen int) error {
	for _, t := range []*Tensor{g, x, idx} {
		if t == nil || t.d != d {
			return fmt.Errorf("cuda: device %d: %s: tensor of another device or nil", d.ordinal, op)
		}
	}
	if g.dtype != Float32 || x.dtype != Float32 || idx.dtype != Int32 || rowLen <= 0 || g.n != idx.n*rowLen || x.n%rowLen != 0 {
		return fmt.Errorf("cuda: device %d: %s: rows of %d, gathered %v %v, indexed %v %v, index %v %v do not agree",
			d.ordinal, op, rowLen, g.dtype, g.shape, x.dtype, x.shape, idx.dtype, idx.shape)
	}
	return nil
}

// Permute writes x.permute(perm...) contiguously into y, as torch: dimension o of y is
// dimension perm[o] of x. x has at most five dimensions and y must have the permuted shape
// (use View to reshape either).
func (d *Device) Permute(y, x *Tensor, perm ...int) error {
	if err := d.check("permute", Float32, y, x); err != nil {
		return err
	}
	r := len(x.shape)
	sorted := slices.Clone(perm)
	slices.Sort(sorted)
	ok := r <= 5 && len(perm) == r && len(y.shape) == r
	for i := 0; ok && i < r; i++ {
		ok = sorted[i] == i && y.shape[i] == x.shape[perm[i]]
	}
	if !ok {
		return fmt.Errorf("cuda: device %d: permute %v of x %v into y %v: not a permutation of at most 5 dimensions giving y's shape",
			d.ordinal, perm, x.shape, y.shape)
	}
	stride := make([]int64, r)
	s := int64(1)
	for i := r - 1; i >= 0; i-- {
		stride[i] = s
		s *= int64(x.shape[i])
	}
	dims, strides := [5]int{1, 1, 1, 1, 1}, [5]int64{}
	for o := range r {
		dims[5-r+o], strides[5-r+o] = y.shape[o], stride[perm[o]]
	}
	args := []uint64{ptr(y), ptr(x), driver.ArgI64(int64(y.n))}
	for _, v := range dims {
		args = append(args, driver.ArgI32(v))
	}
	for _, v := range strides {
		args = append(args, driver.ArgI64(v))
	}
	return d.launch("permute_f32", y.n, args...)
}

// AddBroadcast computes y = x + b where y and x are viewed as [..., d1, d2, d3] (any number
// of leading elements) and b is [d1, d3], broadcast over the leading dimensions and d2:
// attention scores [B·heads, N, N] plus a bias [heads, N·N] (d1 heads, d2 1, d3 N·N), or
// scores [B, nW, heads, N·N] plus a window mask [nW, N·N] (d1 nW, d2 heads). y may alias x.
func (d *Device) AddBroadcast(y, x, b *Tensor, d1, d2, d3 int) error {
	return d.bcast("add_bcast_f32", "add broadcast", y, x, b, d1, d2, d3)
}

// MulBroadcast is AddBroadcast with a product: per-sample scales of stochastic depth are b
// [N] with d1 N, d2 the sample size, d3 1.
func (d *Device) MulBroadcast(y, x, b *Tensor, d1, d2, d3 int) error {
	return d.bcast("mul_bcast_f32", "multiply broadcast", y, x, b, d1, d2, d3)
}

func (d *Device) bcast(name, op string, y, x, b *Tensor, d1, d2, d3 int) error {
	if err := d.check(op, Float32, y, x); err != nil {
		return err
	}
	if d1 <= 0 || d2 <= 0 || d3 <= 0 || y.n%(d1*d2*d3) != 0 {
		return fmt.Errorf("cuda: device %d: %s: %v is not [..., %d, %d, %d]", d.ordinal, op, y.shape, d1, d2, d3)
	}
	if b == nil {
		return fmt.Errorf("cuda: device %d: %s: nil operand", d.ordinal, op)
	}
	if err := d.checkVec(op, d1*d3, b); err != nil {
		return err
	}
	return d.launch(name, y.n, ptr(y), ptr(x), ptr(b), driver.ArgI64(int64(y.n)), driver.ArgI32(d1), driver.ArgI32(d2), driver.ArgI32(d3))
}

// MatMulBatched computes c[i] = alpha·op(a[i])·op(b[i]) + beta·c[i] for row-major 3-D
// float32 tensors [batch, rows, cols] with one strided batched cuBLAS GEMM: op(a[i]) is
// m×k, op(b[i]) is k×n, c[i] is m×n (attention's Q·Kᵀ and P·V over windows and heads).
// a and b may both be float16 or bfloat16 (autocast), accumulated in float32 into c.
func (d *Device) MatMulBatched(c, a, b *Tensor, transA, transB bool, alpha, beta float32) error {
	if !d.hasBLAS {
		return fmt.Errorf("cuda: device %d: batched matmul: opened without cuBLAS", d.ordinal)
	}
	for _, t := range []*Tensor{a, b, c} {
		if t == nil || t.d != d || len(t.shape) != 3 || (t.dtype != Float32 && t != c && t.dtype != Float16 && t.dtype != BFloat16) {
			return fmt.Errorf("cuda: device %d: batched matmul: operands must be 3-D float32 tensors of this device (a and b may both be 16-bit)", d.ordinal)
		}
	}
	if a.dtype != b.dtype {
		return fmt.Errorf("cuda: device %d: batched matmul: a is %v, b %v", d.ordinal, a.dtype, b.dtype)
	}
	batch := a.shape[0]
	m, k := a.shape[1], a.shape[2]
	if transA {
		m, k = k, m
	}
	kb, n := b.shape[1], b.shape[2]
	if transB {
		kb, n = n, kb
	}
	if b.shape[0] != batch || c.shape[0] != batch || k != kb || c.shape[1] != m || c.shape[2] != n {
		return fmt.Errorf("cuda: device %d: batched matmul: shapes %v (t=%v) x %v (t=%v) -> %v", d.ordinal, a.shape, transA, b.shape, transB, c.shape)
	}
	if batch == 0 {
		return nil
	}
	err := d.withContext(func() error {
		return d.blas.GemmStridedBatched(transA, transB, m, n, k, alpha, uintptr(a.Ptr()), int64(m*k), uintptr(b.Ptr()), int64(k*n),
			a.dtype.blas(), beta, uintptr(c.Ptr()), int64(m*n), Float32.blas(), batch)
	})
	if err != nil {
		return fmt.Errorf("cuda: device %d: batched matmul %v x %v: %w", d.ordinal, a.shape, b.shape, err)
	}
	return nil
}
