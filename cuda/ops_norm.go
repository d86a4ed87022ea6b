package cuda

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// Row-wise and normalisation operations, float32. "rows x cols" tensors are row-major with
// the reduced dimension last; batch norm is over NCHW.

func rowsCols(t *Tensor) (int, int) {
	if len(t.shape) == 0 {
		return 1, 1
	}
	cols := t.shape[len(t.shape)-1]
	if cols == 0 {
		return 0, 0
	}
	return t.n / cols, cols
}

// Softmax computes y = softmax(x) over the last dimension.
func (d *Device) Softmax(y, x *Tensor) error {
	if err := d.check("softmax", Float32, y, x); err != nil {
		return err
	}
	r, c := rowsCols(x)
	return d.launchRows("softmax_rows_f32", r, ptr(y), ptr(x), driver.ArgI32(r), driver.ArgI32(c))
}

// SoftmaxBackward computes dx = y*(dy - sum(dy*y)) over the last dimension, y being
// Softmax's output.
func (d *Device) SoftmaxBackward(dx, y, dy *Tensor) error {
	if err := d.check("softmax backward", Float32, dx, y, dy); err != nil {
		return err
	}
	r, c := rowsCols(y)
	return d.launchRows("softmax_bwd_rows_f32", r, ptr(dx), ptr(y), ptr(dy), driver.ArgI32(r), driver.ArgI32(c))
}

// LayerNormSaved holds the per-row mean and reciprocal standard deviation LayerNorm saves
// for its backward pass.
type LayerNormSaved struct{ Mean, Rstd *Tensor }

// Free releases the saved statistics.
func (s LayerNormSaved) Free() { s.Mean.Free(); s.Rstd.Free() }

// LayerNorm normalises x over its last dimension: y = gamma*(x-mean)/sqrt(var+eps) + beta
// (biased variance, as torch). gamma and beta have the last dimension's length, or are nil.
func (d *Device) LayerNorm(y, x, gamma, beta *Tensor, eps float32) (LayerNormSaved, error) {
	if err := d.check("layer norm", Float32, y, x); err != nil {
		return LayerNormSaved{}, err
	}
	r, c := rowsCols(x)
	if err := d.checkVec("layer norm", c, gamma, beta); err != nil {
		return LayerNormSaved{}, err
	}
	mean, err := d.Alloc(Float32, r)
	if err != nil {
		return LayerNormSaved{}, err
	}
	rstd, err := d.Alloc(Float32, r)
	if err != nil {
		mean.Free()
		return LayerNormSaved{}, err
	}
	s := LayerNormSaved{mean, rstd}
	err = d.launchRows("layernorm_f32", r, ptr(y), ptr(mean), ptr(rstd), ptr(x), optPtr(gamma), optPtr(beta),
		driver.ArgI32(r), driver.ArgI32(c), driver.ArgF32(eps))
	return s, err
}

// LayerNormBackward computes dx and, when dgamma and dbeta are not nil, the parameter
// gradients (summed over rows).
func (d *Device) LayerNormBackward(dx, dgamma, dbeta, dy, x, gamma *Tensor, s LayerNormSaved) error {
	if err := d.check("layer norm backward", Float32, dx, dy, x); err != nil {
		return err
	}
	r, c := rowsCols(x)
	if err := d.checkVec("layer norm backward", c, gamma, dgamma, dbeta); err != nil {
		return err
	}
	if err := d.launchRows("layernorm_bwd_f32", r, ptr(dx), ptr(dy), ptr(x), ptr(s.Mean), ptr(s.Rstd), optPtr(gamma),
		driver.ArgI32(r), driver.ArgI32(c)); err != nil {
		return err
	}
	if dgamma == nil || dbeta == nil {
		return nil
	}
	parts, chunk, split := d.colSplit(r, (c+31)/32)
	if !split {
		return d.launch("layernorm_bwd_params_f32", c, ptr(dgamma), ptr(dbeta), ptr(dy), ptr(x), ptr(s.Mean), ptr(s.Rstd),
			driver.ArgI32(r), driver.ArgI32(c))
	}
	part, err := d.Alloc(Float32, 2, parts, c) // dgamma's parts, then dbeta's
	if err != nil {
		return err
	}
	defer part.Free() // stream order: the second pass reads it first
	pg, _ := part.View(0, parts, c)
	pb, _ := part.View(parts*c, parts, c)
	grid := driver.Dim3{X: uint32((c + 31) / 32), Y: uint32(parts), Z: 1}
	if err := d.launchGrid("layernorm_bwd_params_part_f32", grid, 256, 2*256*4, ptr(pg), ptr(pb), ptr(dy), ptr(x),
		ptr(s.Mean), ptr(s.Rstd), driver.ArgI32(r), driver.ArgI32(c), driver.ArgI32(chunk)); err != nil {
		return err
	}
	if err := d.launch("sum_axis_f32", c, ptr(dgamma), ptr(pg), driver.ArgI64(1), driver.ArgI64(int64(parts)), driver.ArgI64(int64(c))); err != nil {
		return err
	}
	return d.launch("sum_axis_f32", c, ptr(dbeta), ptr(pb), driver.ArgI64(1), driver.ArgI64(int64(parts)), driver.ArgI64(int64(c)))
}

// BatchNormSaved holds the batch mean and biased variance of a training-mode BatchNorm.
type BatchNormSaved struct{ Mean, Var *Tensor }

// Free releases the saved statistics.
func (s BatchNormSaved) Free() { s.Mean.Free(); s.Var.Free() }

// BatchNormTrain normalises NCHW x with its batch statistics, y = gamma*(x-mean)/sqrt(var+eps)
// + beta, and updates the running statistics as torch does (momentum, unbiased variance).
// gamma, beta, runMean and runVar have C elements.
func (d *Device) BatchNormTrain(y, x, gamma, beta, runMean, runVar *Tensor, momentum, eps float32) (BatchNormSaved, error) {
	if err := d.check("batch norm", Float32, y, x); err != nil {
		return BatchNormSaved{}, err
	}
	if len(x.shape) != 4 {
		return BatchNormSaved{}, fmt.Errorf("cuda: device %d: batch norm: x is %v, want NCHW", d.ordinal, x.shape)
	}
	n, c, hw := x.shape[0], x.shape[1], x.shape[2]*x.shape[3]
	if err := d.checkVec("batch norm", c, gamma, beta, runMean, runVar); err != nil {
		return BatchNormSaved{}, err
	}
	mean, err := d.Alloc(Float32, c)
	if err != nil {
		return BatchNormSaved{}, err
	}
	v, err := d.Alloc(Float32, c)
	if err != nil {
		mean.Free()
		return BatchNormSaved{}, err
	}
	s := BatchNormSaved{mean, v}
	if err := d.BatchNormStats(mean, v, x); err != nil {
		return s, err
	}
	if err := d.BatchNormApply(y, x, gamma, beta, mean, v, eps); err != nil {
		return s, err
	}
	if runMean == nil {
		return s, nil
	}
	return s, d.BatchNormRunning(runMean, runVar, mean, v, momentum, float64(n*hw))
}

// BatchNormStats computes the per-channel mean and biased variance of NCHW x (mean and
// variance have C elements): the batch statistics BatchNormTrain normalises with.
func (d *Device) BatchNormStats(mean, variance, x *Tensor) error {
	if err := d.check("batch norm statistics", Float32, x); err != nil {
		return err
	}
	if len(x.shape) != 4 {
		return fmt.Errorf("cuda: device %d: batch norm statistics: x is %v, want NCHW", d.ordinal, x.shape)
	}
	n, c, hw := x.shape[0], x.shape[1], x.shape[2]*x.shape[3]
	if err := d.checkVec("batch norm statistics", c, mean, variance); err != nil {
		return err
	}
	return d.launchRows("batchnorm_stats_f32", c, ptr(mean), ptr(variance), ptr(x), driver.ArgI32(n), driver.ArgI32(c), driver.ArgI32(hw))
}

// BatchNormRunning updates the running statistics (C elements each) from a batch's mean and
// biased variance over m values per channel, as torch does: running = (1-momentum)·running
// + momentum·batch, with the unbiased variance (·m/(m-1)).
func (d *Device) BatchNormRunning(runMean, runVar, mean, variance *Tensor, momentum float32, m float64) error {
	c := mean.Len()
	if err := d.checkVec("batch norm running statistics", c, runMean, runVar, variance); err != nil {
		return err
	}
	unbias, mf := float32(1), float32(m)
	if mf > 1 {
		unbias = mf / (mf - 1)
	}
	return d.launch("batchnorm_running_f32", c, ptr(runMean), ptr(runVar), ptr(mean), ptr(variance), driver.ArgI32(c),
		driver.ArgF32(momentum), driver.ArgF32(unbias))
}

// BatchNormApply normalises NCHW x with given statistics (evaluation mode with the running
// statistics).
func (d *Device) BatchNormApply(y, x, gamma, beta, mean, variance *Tensor, eps float32) error {
	if err := d.check("batch norm apply", Float32, y, x); err != nil {
		return err
	}
	if len(x.shape) != 4 {
		return fmt.Errorf("cuda: device %d: batch norm: x is %v, want NCHW", d.ordinal, x.shape)
	}
	n, c, hw := x.shape[0], x.shape[1], x.shape[2]*x.shape[3]
	if err := d.checkVec("batch norm apply", c, gamma, beta, mean, variance); err != nil {
		return err
	}
	return d.launch("batchnorm_apply_f32", x.n, ptr(y), ptr(x), ptr(mean), ptr(variance), ptr(gamma), ptr(beta),
		driver.ArgI32(n), driver.ArgI32(c), driver.ArgI32(hw), driver.ArgF32(eps))
}

// BatchNormBackward computes dx, dgamma and dbeta of a training-mode BatchNorm.
func (d *Device) BatchNormBackward(dx, dgamma, dbeta, dy, x, gamma *Tensor, s BatchNormSaved, eps float32) error {
	if err := d.check("batch norm backward", Float32, dx, dy, x); err != nil {
		return err
	}
	if len(x.shape) != 4 {
		return fmt.Errorf("cuda: device %d: batch norm backward: x is %v, want NCHW", d.ordinal, x.shape)
	}
	n, c, hw := x.shape[0], x.shape[1], x.shape[2]*x.shape[3]
	if err := d.checkVec("batch norm backward", c, dgamma, dbeta, gamma); err != nil {
		return err
	}
	return d.launchRows("batchnorm_bwd_f32", c, ptr(dx), ptr(dgamma), ptr(dbeta), ptr(dy), ptr(x), ptr(s.Mean), ptr(s.Var),
		ptr(gamma), driver.ArgI32(n), driver.ArgI32(c), driver.ArgI32(hw), driver.ArgF32(eps))
}

// SumRows computes y[i] = sum_j x[i,j] over the last dimension (y has rows elements).
func (d *Device) SumRows(y, x *Tensor) error {
	r, c := rowsCols(x)
	if err := d.checkVec("sum rows", r, y); err != nil {
		return err
	}
	return d.launchRows("sum_rows_f32", r, ptr(y), ptr(x), driver.ArgI32(r), driver.ArgI32(c))
}

// SumCols computes y[j] = sum_i x[i,j] (a bias gradient; y has cols elements).
func (d *Device) SumCols(y, x *Tensor) error {
	r, c := rowsCols(x)
	if err := d.checkVec("sum cols", c, y); err != nil {
		return err
	}
	return d.launch("sum_cols_f32", c, ptr(y), ptr(x), driver.ArgI32(r), driver.ArgI32(c))
}

// GlobalAvgPool computes y[n,c] = mean over H,W of NCHW x; y has N*C elements.
func (d *Device) GlobalAvgPool(y, x *Tensor) error {
	if len(x.shape) != 4 {
		return fmt.Errorf("cuda: device %d: global average pool: x is %v, want NCHW", d.ordinal, x.shape)
	}
	nc, hw := x.shape[0]*x.shape[1], x.shape[2]*x.shape[3]
	if err := d.checkVec("global average pool", nc, y); err != nil {
		return err
	}
	return d.launch("avgpool_global_f32", nc, ptr(y), ptr(x), driver.ArgI32(nc), driver.ArgI32(hw))
}

// GlobalAvgPoolBackward spreads dy[n,c]/(H*W) over NCHW dx.
func (d *Device) GlobalAvgPoolBackward(dx, dy *Tensor) error {
	if len(dx.shape) != 4 {
		return fmt.Errorf("cuda: device %d: global average pool backward: dx is %v, want NCHW", d.ordinal, dx.shape)
	}
	nc, hw := dx.shape[0]*dx.shape[1], dx.shape[2]*dx.shape[3]
	if err := d.checkVec("global average pool backward", nc, dy); err != nil {
		return err
	}
	return d.launch("avgpool_global_bwd_f32", dx.n, ptr(dx), ptr(dy), driver.ArgI32(nc), driver.ArgI32(hw))
}

// checkVec checks that every non-nil tensor is a float32 of n elements on d.
func (d *Device) checkVec(op string, n int, ts ...*Tensor) error {
	for _, t := range ts {
		if t != nil && (t.d != d || t.dtype != Float32 || t.n != n) {
			return fmt.Errorf("cuda: device %d: %s: parameter %v %v, want float32 with %d elements", d.ordinal, op, t.dtype, t.shape, n)
		}
	}
	return nil
}

func optPtr(t *Tensor) uint64 {
	if t == nil {
		return 0
	}
	return ptr(t)
}
