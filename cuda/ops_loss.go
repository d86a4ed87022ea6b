package cuda

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// The graph executor's (cuda/tape) loss and dropout kernels for nn/ops's ops: labels are
// class indices held as float32 (as nn/ops's), and masks are nn/ops's counter-based ones.

// CrossEntropySmoothed computes, for logits x [rows, cols] and float32 class indices labels
// [rows], the per-row loss [rows] with label smoothing s: (1-s)·(lse - x[label]) +
// s·(lse - mean(x)), PyTorch's CrossEntropyLoss(label_smoothing=s) before the mean. A label
// that is not an index in [0, cols) gives NaN.
func (d *Device) CrossEntropySmoothed(loss, x, labels *Tensor, s float32) error {
	r, c := rowsCols(x)
	if err := d.check("cross entropy", Float32, x); err != nil {
		return err
	}
	if err := d.checkVec("cross entropy", r, loss, labels); err != nil {
		return err
	}
	return d.launchRows("cross_entropy_ls_f32", r, ptr(loss), ptr(x), ptr(labels), driver.ArgI32(r), driver.ArgI32(c), driver.ArgF32(s))
}

// CrossEntropySmoothedBackward computes dx [rows, cols] of the mean of CrossEntropySmoothed's
// losses, times g (the loss's gradient, one element on the device): g/rows·(softmax(x) -
// (1-s)·onehot(label) - s/cols).
func (d *Device) CrossEntropySmoothedBackward(dx, x, labels, g *Tensor, s float32) error {
	if err := d.check("cross entropy backward", Float32, dx, x); err != nil {
		return err
	}
	r, c := rowsCols(x)
	if err := d.checkVec("cross entropy backward", r, labels); err != nil {
		return err
	}
	if err := d.checkVec("cross entropy backward", 1, g); err != nil {
		return err
	}
	return d.launchRows("cross_entropy_ls_bwd_f32", r, ptr(dx), ptr(x), ptr(labels), ptr(g), driver.ArgI32(r), driver.ArgI32(c), driver.ArgF32(s))
}

// Dropout sets y = x·scale where the mask keeps an element and 0 elsewhere; element i uses
// draw i/row of the mask (row 1: Dropout; the sample size: DropPath). The mask is nn/ops's:
// draw j is kept when SplitMix64's finaliser of key + j·0x9e3779b97f4a7c15, shifted right by
// 11, is at least threshold (see nn/ops.DropMask). y may alias x.
func (d *Device) Dropout(y, x *Tensor, key, threshold uint64, scale float32, row int) error {
	if err := d.check("dropout", Float32, y, x); err != nil {
		return err
	}
	if row <= 0 || x.n%row != 0 {
		return fmt.Errorf("cuda: device %d: dropout: %v in draws of %d elements", d.ordinal, x.shape, row)
	}
	return d.launch("dropout_f32", y.n, ptr(y), ptr(x), driver.ArgI64(int64(key)), driver.ArgI64(int64(threshold)), driver.ArgF32(scale),
		driver.ArgI64(int64(y.n)), driver.ArgI64(int64(row)))
}
