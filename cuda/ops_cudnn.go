package cuda

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda/cudnn"
)

// ConvImpl selects how Conv2d and Conv2dBackward run.
type ConvImpl uint8

// Convolution implementations.
const (
	// ConvAuto uses cuDNN when it is loaded, else im2col.
	ConvAuto ConvImpl = iota
	// ConvCuDNN uses cuDNN's convolution (algorithms by its heuristics, no TF32 for float32).
	ConvCuDNN
	// ConvIm2col uses im2col plus cuBLAS batched GEMM (no further library).
	ConvIm2col
)

// String returns "auto", "cudnn" or "im2col".
func (c ConvImpl) String() string {
	switch c {
	case ConvCuDNN:
		return "cudnn"
	case ConvIm2col:
		return "im2col"
	}
	return "auto"
}

// SetConvImpl selects the convolution implementation; ConvCuDNN fails when cuDNN could not
// be loaded, with the reason.
func (d *Device) SetConvImpl(c ConvImpl) error {
	if c == ConvCuDNN && !d.hasDNN {
		return fmt.Errorf("cuda: device %d: cuDNN unavailable: %w", d.ordinal, d.dnnErr)
	}
	d.conv = c
	return nil
}

// ConvImplInUse reports the implementation convolutions use now (cudnn or im2col) and, for
// im2col under ConvAuto, why cuDNN is not used.
func (d *Device) ConvImplInUse() (ConvImpl, error) {
	if d.useDNN() {
		return ConvCuDNN, nil
	}
	if d.conv == ConvIm2col {
		return ConvIm2col, nil
	}
	return ConvIm2col, d.dnnErr
}

func (d *Device) useDNN() bool { return d.hasDNN && d.conv != ConvIm2col }

func dnnType(dt DType) cudnn.DataType {
	switch dt {
	case Float16:
		return cudnn.Half
	case BFloat16:
		return cudnn.BFloat16
	}
	return cudnn.Float
}

// dnnConv returns the cached descriptors of a convolution.
func (d *Device) dnnConv(cd convDims, p Conv2dParams, dt DType) (*cudnn.Conv, error) {
	p = p.norm()
	spec := cudnn.ConvSpec{N: cd.n, C: cd.c, H: cd.h, W: cd.w, K: cd.oc, KH: cd.kh, KW: cd.kw, OH: cd.oh, OW: cd.ow,
		PadH: p.PadH, PadW: p.PadW, StrideH: p.StrideH, StrideW: p.StrideW, DilH: p.DilH, DilW: p.DilW, Type: dnnType(dt)}
	d.convMu.Lock()
	defer d.convMu.Unlock()
	if c, ok := d.convs[spec]; ok {
		return c, nil
	}
	var c *cudnn.Conv
	err := d.withContext(func() error {
		var err error
		c, err = cudnn.NewConv(d.dnn, spec)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", d.ordinal, err)
	}
	d.convs[spec] = c
	return c, nil
}

// workspace allocates n bytes of scratch (nil for none).
func (d *Device) workspace(n int) (*Tensor, uintptr, error) {
	if n == 0 {
		return nil, 0, nil
	}
	t, err := d.Alloc(Float32, (n+3)/4)
	if err != nil {
		return nil, 0, err
	}
	return t, uintptr(t.Ptr()), nil
}

func (d *Device) conv2dDNN(y, x, w *Tensor, cd convDims, p Conv2dParams, dtype16 DType) error {
	dt := Float32
	if dtype16 == Float16 || dtype16 == BFloat16 {
		dt = dtype16
	}
	c, err := d.dnnConv(cd, p, dt)
	if err != nil {
		return err
	}
	ws, wsp, err := d.workspace(c.FwdWorkspace)
	if err != nil {
		return err
	}
	defer ws.Free()
	if dt == Float32 {
		return d.dnnErrorf("conv2d", d.withContext(func() error {
			return c.Forward(uintptr(x.Ptr()), uintptr(w.Ptr()), uintptr(y.Ptr()), wsp, 1, 0)
		}))
	}
	x16, w16, _, free, err := d.operands(x, w, dt)
	if err != nil {
		return err
	}
	defer free()
	y16, err := d.Alloc(dt, y.shape...)
	if err != nil {
		return err
	}
	defer y16.Free()
	if err := d.withContext(func() error {
		return c.Forward(uintptr(x16.Ptr()), uintptr(w16.Ptr()), uintptr(y16.Ptr()), wsp, 1, 0)
	}); err != nil {
		return d.dnnErrorf("conv2d", err)
	}
	return d.Cast(y, y16)
}

func (d *Device) conv2dBackwardDNN(dx, dw, dy, x, w *Tensor, cd convDims, p Conv2dParams, dtype16 DType) error {
	dt := Float32
	if dtype16 == Float16 || dtype16 == BFloat16 {
		dt = dtype16
	}
	c, err := d.dnnConv(cd, p, dt)
	if err != nil {
		return err
	}
	ws, wsp, err := d.workspace(max(c.BwdDataWorkspace, c.BwdFilterWorkspace))
	if err != nil {
		return err
	}
	defer ws.Free()
	gx, gw, gdy := x, w, dy
	gdw, gdx := dw, dx
	if dt != Float32 {
		var free func()
		if gx, gdy, _, free, err = d.operands(x, dy, dt); err != nil {
			return err
		}
		defer free()
		if dx != nil {
			if gw, err = d.Alloc(dt, w.shape...); err != nil {
				return err
			}
			defer gw.Free()
			if err := d.Cast(gw, w); err != nil {
				return err
			}
		}
		if dw != nil {
			if gdw, err = d.Alloc(dt, dw.shape...); err != nil {
				return err
			}
			defer gdw.Free()
		}
		if dx != nil {
			if gdx, err = d.Alloc(dt, dx.shape...); err != nil {
				return err
			}
			defer gdx.Free()
		}
	}
	err = d.withContext(func() error {
		if dw != nil {
			if err := c.BackwardFilter(uintptr(gx.Ptr()), uintptr(gdy.Ptr()), uintptr(gdw.Ptr()), wsp, 1, 0); err != nil {
				return err
			}
		}
		if dx == nil {
			return nil
		}
		return c.BackwardData(uintptr(gw.Ptr()), uintptr(gdy.Ptr()), uintptr(gdx.Ptr()), wsp, 1, 0)
	})
	if err != nil {
		return d.dnnErrorf("conv2d backward", err)
	}
	if dt == Float32 {
		return nil
	}
	if dw != nil {
		if err := d.Cast(dw, gdw); err != nil {
			return err
		}
	}
	if dx != nil {
		return d.Cast(dx, gdx)
	}
	return nil
}

// conv16DNN runs one cuDNN pass on tensors all of the 16-bit type dt (cuDNN's
// PSEUDO_HALF/PSEUDO_BFLOAT16 configurations: float32 accumulation, the result stored in
// dt): pass 0 forward (a x, b w, out y), 1 backward data (a w, b dy, out dx), 2 backward
// filter (a x, b dy, out dw).
func (d *Device) conv16DNN(pass int, cd convDims, p Conv2dParams, dt DType, a, b, out *Tensor) error {
	c, err := d.dnnConv(cd, p, dt)
	if err != nil {
		return err
	}
	ws, wsp, err := d.workspace([3]int{c.FwdWorkspace, c.BwdDataWorkspace, c.BwdFilterWorkspace}[pass])
	if err != nil {
		return err
	}
	defer ws.Free()
	return d.withContext(func() error {
		switch pass {
		case 0:
			return c.Forward(uintptr(a.Ptr()), uintptr(b.Ptr()), uintptr(out.Ptr()), wsp, 1, 0)
		case 1:
			return c.BackwardData(uintptr(a.Ptr()), uintptr(b.Ptr()), uintptr(out.Ptr()), wsp, 1, 0)
		}
		return c.BackwardFilter(uintptr(a.Ptr()), uintptr(b.Ptr()), uintptr(out.Ptr()), wsp, 1, 0)
	})
}

func (d *Device) dnnErrorf(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cuda: device %d: %s (cuDNN): %w", d.ordinal, op, err)
}
