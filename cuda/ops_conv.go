package cuda

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// Conv2dParams describes a 2-D convolution or pooling window, as torch.nn.Conv2d.
type Conv2dParams struct {
	// StrideH, StrideW, PadH, PadW, DilH, DilW are the usual; zero strides and dilations mean 1.
	StrideH, StrideW, PadH, PadW, DilH, DilW int
}

func (p Conv2dParams) norm() Conv2dParams {
	for _, v := range []*int{&p.StrideH, &p.StrideW, &p.DilH, &p.DilW} {
		if *v == 0 {
			*v = 1
		}
	}
	return p
}

// OutSize is the output height and width for an h×w input and a kh×kw kernel.
func (p Conv2dParams) OutSize(h, w, kh, kw int) (int, int) {
	p = p.norm()
	return (h+2*p.PadH-p.DilH*(kh-1)-1)/p.StrideH + 1, (w+2*p.PadW-p.DilW*(kw-1)-1)/p.StrideW + 1
}

type convDims struct{ n, c, h, w, oc, kh, kw, oh, ow int }

func (d *Device) convDims(op string, x, wt, y *Tensor, p Conv2dParams) (convDims, error) {
	cd, err := d.convShape(op, x, wt, y, p)
	if err != nil {
		return convDims{}, err
	}
	for _, t := range []*Tensor{x, wt, y} {
		if t.dtype != Float32 {
			return convDims{}, fmt.Errorf("cuda: device %d: %s: tensors must be float32 on this device", d.ordinal, op)
		}
	}
	return cd, nil
}

// convShape is convDims without the element type: the geometry, checked.
func (d *Device) convShape(op string, x, wt, y *Tensor, p Conv2dParams) (convDims, error) {
	for _, t := range []*Tensor{x, wt, y} {
		if t == nil || t.d != d {
			return convDims{}, fmt.Errorf("cuda: device %d: %s: tensors must be on this device", d.ordinal, op)
		}
	}
	if len(x.shape) != 4 || len(wt.shape) != 4 || len(y.shape) != 4 {
		return convDims{}, fmt.Errorf("cuda: device %d: %s: x %v, w %v, y %v must be 4-D", d.ordinal, op, x.shape, wt.shape, y.shape)
	}
	cd := convDims{n: x.shape[0], c: x.shape[1], h: x.shape[2], w: x.shape[3], oc: wt.shape[0], kh: wt.shape[2], kw: wt.shape[3]}
	cd.oh, cd.ow = p.OutSize(cd.h, cd.w, cd.kh, cd.kw)
	if wt.shape[1] != cd.c || y.shape[0] != cd.n || y.shape[1] != cd.oc || y.shape[2] != cd.oh || y.shape[3] != cd.ow {
		return convDims{}, fmt.Errorf("cuda: device %d: %s: x %v, w %v (groups must be 1), y %v, want y [%d %d %d %d]",
			d.ordinal, op, x.shape, wt.shape, y.shape, cd.n, cd.oc, cd.oh, cd.ow)
	}
	return cd, nil
}

func (d *Device) im2col(name string, col, x *Tensor, cd convDims, p Conv2dParams) error {
	p = p.norm()
	total := cd.n * cd.c * cd.kh * cd.kw * cd.oh * cd.ow
	if name == "col2im_f32" {
		total = cd.n * cd.c * cd.h * cd.w
	}
	return d.launch(name, total, ptr(col), ptr(x), driver.ArgI32(cd.n), driver.ArgI32(cd.c), driver.ArgI32(cd.h), driver.ArgI32(cd.w),
		driver.ArgI32(cd.kh), driver.ArgI32(cd.kw), driver.ArgI32(p.StrideH), driver.ArgI32(p.StrideW), driver.ArgI32(p.PadH),
		driver.ArgI32(p.PadW), driver.ArgI32(p.DilH), driver.ArgI32(p.DilW), driver.ArgI32(cd.oh), driver.ArgI32(cd.ow))
}

// Conv2d computes y = conv2d(x, w) for NCHW x [N,C,H,W], weight w [OC,C,KH,KW] and y
// [N,OC,OH,OW], without bias and with one group, through cuDNN (see SetConvImpl) or else
// im2col of the whole batch and one strided batched GEMM (the weight shared by every image)
// that writes NCHW directly. dtype16 selects autocast: 0 for float32, else Float16/BFloat16
// operands with float32 accumulation (cuDNN stores the 16-bit result, which is then widened).
func (d *Device) Conv2d(y, x, w *Tensor, p Conv2dParams, dtype16 DType) error {
	cd, err := d.convDims("conv2d", x, w, y, p)
	if err != nil {
		return err
	}
	if d.useDNN() {
		return d.conv2dDNN(y, x, w, cd, p, dtype16)
	}
	k, pix := cd.c*cd.kh*cd.kw, cd.oh*cd.ow
	col, err := d.Alloc(Float32, cd.n, k, pix)
	if err != nil {
		return err
	}
	defer col.Free()
	if err := d.im2col("im2col_f32", col, x, cd, p); err != nil {
		return err
	}
	a, b, dt, free, err := d.operands(w, col, dtype16)
	if err != nil {
		return err
	}
	defer free()
	// y[n] (OC×P) = W (OC×K) · col[n] (K×P) for every n.
	err = d.withContext(func() error {
		return d.blas.GemmStridedBatched(false, false, cd.oc, pix, k, 1, uintptr(a.Ptr()), 0, uintptr(b.Ptr()), int64(k*pix),
			dt.blas(), 0, uintptr(y.Ptr()), int64(cd.oc*pix), Float32.blas(), cd.n)
	})
	if err != nil {
		return fmt.Errorf("cuda: device %d: conv2d %v*%v: %w", d.ordinal, x.shape, w.shape, err)
	}
	return nil
}

// Conv2dBackward computes dx and dw (both overwritten) of Conv2d from dy. Either may be nil
// (not both): dx for the first layer, one of them for an executor whose graph has a node per
// gradient (cuda/tape). x is read only for dw and w only for dx; the other gives its shape
// (so dx may stand for x and dw for w).
func (d *Device) Conv2dBackward(dx, dw, dy, x, w *Tensor, p Conv2dParams, dtype16 DType) error {
	if dx == nil && dw == nil {
		return fmt.Errorf("cuda: device %d: conv2d backward: neither dx nor dw", d.ordinal)
	}
	cd, err := d.convDims("conv2d backward", x, w, dy, p)
	if err != nil {
		return err
	}
	if d.useDNN() {
		return d.conv2dBackwardDNN(dx, dw, dy, x, w, cd, p, dtype16)
	}
	k, pix := cd.c*cd.kh*cd.kw, cd.oh*cd.ow
	col, err := d.Alloc(Float32, cd.n, k, pix)
	if err != nil {
		return err
	}
	defer col.Free()
	if dw != nil {
		if err := d.convFilterGrad(dw, dy, x, col, cd, p, dtype16); err != nil {
			return err
		}
	}
	if dx == nil {
		return nil
	}
	wt, gg, dt2, free2, err := d.operands(w, dy, dtype16)
	if err != nil {
		return err
	}
	defer free2()
	// dcol[n] (K×P) = Wᵀ (K×OC) · dy[n] (OC×P), then col2im sums the overlaps into dx.
	if err := d.withContext(func() error {
		return d.blas.GemmStridedBatched(true, false, k, pix, cd.oc, 1, uintptr(wt.Ptr()), 0, uintptr(gg.Ptr()), int64(cd.oc*pix),
			dt2.blas(), 0, uintptr(col.Ptr()), int64(k*pix), Float32.blas(), cd.n)
	}); err != nil {
		return fmt.Errorf("cuda: device %d: conv2d backward (input) %v: %w", d.ordinal, x.shape, err)
	}
	return d.im2col("col2im_f32", dx, col, cd, p)
}

// convFilterGrad computes dw from dy and x through the im2col columns col.
func (d *Device) convFilterGrad(dw, dy, x, col *Tensor, cd convDims, p Conv2dParams, dtype16 DType) error {
	k, pix := cd.c*cd.kh*cd.kw, cd.oh*cd.ow
	if err := d.im2col("im2col_f32", col, x, cd, p); err != nil {
		return err
	}
	g, c16, dt, free, err := d.operands(dy, col, dtype16)
	if err != nil {
		return err
	}
	defer free()
	// dW (OC×K) = Σ_n dy[n] (OC×P) · col[n]ᵀ (P×K): accumulate image by image.
	err = d.withContext(func() error {
		for i := range cd.n {
			beta := float32(1)
			if i == 0 {
				beta = 0
			}
			es := uintptr(dt.Size())
			err := d.blas.GemmEx(false, true, cd.oc, k, pix, 1, uintptr(g.Ptr())+uintptr(i*cd.oc*pix)*es,
				uintptr(c16.Ptr())+uintptr(i*k*pix)*es, dt.blas(), beta, uintptr(dw.Ptr()), Float32.blas())
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cuda: device %d: conv2d backward (weight) %v: %w", d.ordinal, dw.shape, err)
	}
	return nil
}

// operands returns a and b as GEMM operands: themselves for float32, or 16-bit copies (which
// free releases) under autocast.
func (d *Device) operands(a, b *Tensor, dtype16 DType) (*Tensor, *Tensor, DType, func(), error) {
	if dtype16 == 0 || dtype16 == Float32 {
		return a, b, Float32, func() {}, nil
	}
	a16, err := d.Alloc(dtype16, a.shape...)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	b16, err := d.Alloc(dtype16, b.shape...)
	if err != nil {
		a16.Free()
		return nil, nil, 0, nil, err
	}
	free := func() { a16.Free(); b16.Free() }
	if err := d.Cast(a16, a); err != nil {
		free()
		return nil, nil, 0, nil, err
	}
	if err := d.Cast(b16, b); err != nil {
		free()
		return nil, nil, 0, nil, err
	}
	return a16, b16, dtype16, free, nil
}

// Conv2d16 is Conv2d for operands already in 16 bits (autocast's cast of a value, made once
// for every convolution that reads it): x and w both Float16 or both BFloat16, float32
// accumulation. A float32 y receives the float32 sums, through im2col in 16 bits and a
// strided batched cublasGemmEx (cuDNN's 16-bit convolutions store their result in the input
// type, so they cannot give them). A y of the operands' type receives the sums rounded to
// nearest even: by cuDNN when in use (see SetConvImpl), else by the im2col path and a cast.
func (d *Device) Conv2d16(y, x, w *Tensor, p Conv2dParams) error {
	cd, dt, err := d.conv16("conv2d", x, w, y, p, []*Tensor{x, w}, []*Tensor{y})
	if err != nil {
		return err
	}
	if y.dtype == dt && d.useDNN() {
		return d.dnnErrorf("conv2d", d.conv16DNN(0, cd, p, dt, x, w, y))
	}
	yf, done, err := d.f32Out(y)
	if err != nil {
		return err
	}
	k, pix := cd.c*cd.kh*cd.kw, cd.oh*cd.ow
	col, err := d.Alloc(dt, cd.n, k, pix)
	if err != nil {
		return done(err)
	}
	defer col.Free()
	if err := d.im2col("im2col_x16", col, x, cd, p); err != nil {
		return done(err)
	}
	// y[n] (OC×P) = W (OC×K) · col[n] (K×P) for every n.
	err = d.withContext(func() error {
		return d.blas.GemmStridedBatched(false, false, cd.oc, pix, k, 1, uintptr(w.Ptr()), 0, uintptr(col.Ptr()), int64(k*pix),
			dt.blas(), 0, uintptr(yf.Ptr()), int64(cd.oc*pix), Float32.blas(), cd.n)
	})
	if err != nil {
		err = fmt.Errorf("cuda: device %d: conv2d %v*%v in %v: %w", d.ordinal, x.shape, w.shape, dt, err)
	}
	return done(err)
}

// Conv2dBackward16 is Conv2dBackward for operands already in 16 bits: dy, and x (read for
// dw) and w (read for dx), all Float16 or all BFloat16, float32 accumulation. dx and dw are
// float32 (the float32 sums: GEMMs of the 16-bit operands, then col2im for dx) or of the
// operands' type (the sums rounded, by cuDNN when in use), as Conv2d16's y.
func (d *Device) Conv2dBackward16(dx, dw, dy, x, w *Tensor, p Conv2dParams) error {
	if dx == nil && dw == nil {
		return fmt.Errorf("cuda: device %d: conv2d backward: neither dx nor dw", d.ordinal)
	}
	read := []*Tensor{dy}
	if dw != nil {
		read = append(read, x)
	}
	if dx != nil {
		read = append(read, w)
	}
	cd, dt, err := d.conv16("conv2d backward", x, w, dy, p, read, []*Tensor{dx, dw})
	if err != nil {
		return err
	}
	k, pix := cd.c*cd.kh*cd.kw, cd.oh*cd.ow
	if dw != nil {
		if err := d.convFilterGrad16(dw, dy, x, cd, p, dt); err != nil {
			return err
		}
	}
	if dx == nil {
		return nil
	}
	if dx.dtype == dt && d.useDNN() {
		return d.dnnErrorf("conv2d backward (input)", d.conv16DNN(1, cd, p, dt, w, dy, dx))
	}
	dxf, done, err := d.f32Out(dx)
	if err != nil {
		return err
	}
	col, err := d.Alloc(Float32, cd.n, k, pix)
	if err != nil {
		return done(err)
	}
	defer col.Free()
	// dcol[n] (K×P) = Wᵀ (K×OC) · dy[n] (OC×P), then col2im sums the overlaps into dx.
	if err := d.withContext(func() error {
		return d.blas.GemmStridedBatched(true, false, k, pix, cd.oc, 1, uintptr(w.Ptr()), 0, uintptr(dy.Ptr()), int64(cd.oc*pix),
			dt.blas(), 0, uintptr(col.Ptr()), int64(k*pix), Float32.blas(), cd.n)
	}); err != nil {
		return done(fmt.Errorf("cuda: device %d: conv2d backward (input) %v in %v: %w", d.ordinal, x.shape, dt, err))
	}
	return done(d.im2col("col2im_f32", dxf, col, cd, p))
}

// convFilterGrad16 is Conv2dBackward16's dw.
func (d *Device) convFilterGrad16(dw, dy, x *Tensor, cd convDims, p Conv2dParams, dt DType) error {
	if dw.dtype == dt && d.useDNN() {
		return d.dnnErrorf("conv2d backward (weight)", d.conv16DNN(2, cd, p, dt, x, dy, dw))
	}
	dwf, done, err := d.f32Out(dw)
	if err != nil {
		return err
	}
	k, pix := cd.c*cd.kh*cd.kw, cd.oh*cd.ow
	col, err := d.Alloc(dt, cd.n, k, pix)
	if err != nil {
		return done(err)
	}
	defer col.Free()
	if err := d.im2col("im2col_x16", col, x, cd, p); err != nil {
		return done(err)
	}
	// dW (OC×K) = Σ_n dy[n] (OC×P) · col[n]ᵀ (P×K): accumulate image by image, in float32.
	es := uintptr(dt.Size())
	err = d.withContext(func() error {
		for i := range cd.n {
			beta := float32(1)
			if i == 0 {
				beta = 0
			}
			err := d.blas.GemmEx(false, true, cd.oc, k, pix, 1, uintptr(dy.Ptr())+uintptr(i*cd.oc*pix)*es,
				uintptr(col.Ptr())+uintptr(i*k*pix)*es, dt.blas(), beta, uintptr(dwf.Ptr()), Float32.blas())
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("cuda: device %d: conv2d backward (weight) %v in %v: %w", d.ordinal, dw.shape, dt, err)
	}
	return done(err)
}

// conv16 checks a 16-bit convolution: the geometry of x, w and y, the tensors read all of
// one 16-bit type (returned), the results (nil ones skipped) float32 or that type.
func (d *Device) conv16(op string, x, w, y *Tensor, p Conv2dParams, read, outs []*Tensor) (convDims, DType, error) {
	cd, err := d.convShape(op, x, w, y, p)
	if err != nil {
		return convDims{}, 0, err
	}
	dt := read[0].dtype
	if dt != Float16 && dt != BFloat16 {
		return convDims{}, 0, fmt.Errorf("cuda: device %d: %s: operands are %v, want float16 or bfloat16", d.ordinal, op, dt)
	}
	for _, t := range read {
		if t.dtype != dt {
			return convDims{}, 0, fmt.Errorf("cuda: device %d: %s: operands of types %v and %v", d.ordinal, op, dt, t.dtype)
		}
	}
	for _, t := range outs {
		if t != nil && t.dtype != Float32 && t.dtype != dt {
			return convDims{}, 0, fmt.Errorf("cuda: device %d: %s: a %v result of %v operands", d.ordinal, op, t.dtype, dt)
		}
	}
	return cd, dt, nil
}

// f32Out returns t itself when it is float32, else a float32 temporary; done(err) casts the
// temporary into t (when err is nil), frees it and returns the first error.
func (d *Device) f32Out(t *Tensor) (*Tensor, func(error) error, error) {
	if t.dtype == Float32 {
		return t, func(err error) error { return err }, nil
	}
	f, err := d.Alloc(Float32, t.shape...)
	if err != nil {
		return nil, nil, err
	}
	return f, func(err error) error {
		defer f.Free()
		if err != nil {
			return err
		}
		return d.Cast(t, f)
	}, nil
}

// MaxPool2d computes y = max pooling of NCHW x with a kh×kw window (dilation 1) and returns
// the Int32 argmax tensor its backward needs.
func (d *Device) MaxPool2d(y, x *Tensor, kh, kw int, p Conv2dParams) (*Tensor, error) {
	p = p.norm()
	if len(x.shape) != 4 || len(y.shape) != 4 {
		return nil, fmt.Errorf("cuda: device %d: max pool: x %v, y %v must be NCHW", d.ordinal, x.shape, y.shape)
	}
	n, c, h, w := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	oh, ow := p.OutSize(h, w, kh, kw)
	if y.shape[0] != n || y.shape[1] != c || y.shape[2] != oh || y.shape[3] != ow {
		return nil, fmt.Errorf("cuda: device %d: max pool: y %v, want [%d %d %d %d]", d.ordinal, y.shape, n, c, oh, ow)
	}
	arg, err := d.Alloc(Int32, y.shape...)
	if err != nil {
		return nil, err
	}
	err = d.launch("maxpool_f32", y.n, ptr(y), ptr(arg), ptr(x), driver.ArgI32(n), driver.ArgI32(c), driver.ArgI32(h), driver.ArgI32(w),
		driver.ArgI32(kh), driver.ArgI32(kw), driver.ArgI32(p.StrideH), driver.ArgI32(p.StrideW), driver.ArgI32(p.PadH),
		driver.ArgI32(p.PadW), driver.ArgI32(oh), driver.ArgI32(ow))
	if err != nil {
		arg.Free()
		return nil, err
	}
	return arg, nil
}

// MaxPool2dBackward computes dx (NCHW, overwritten) from dy and MaxPool2d's argmax.
func (d *Device) MaxPool2dBackward(dx, dy, arg *Tensor) error {
	if len(dx.shape) != 4 || len(dy.shape) != 4 || arg.n != dy.n {
		return fmt.Errorf("cuda: device %d: max pool backward: dx %v, dy %v", d.ordinal, dx.shape, dy.shape)
	}
	if err := d.ctx.MemsetD32Async(dx.Ptr(), 0, dx.n, d.stream); err != nil {
		return fmt.Errorf("cuda: device %d: %w", d.ordinal, err)
	}
	nc := dx.shape[0] * dx.shape[1]
	return d.launch("maxpool_bwd_f32", dy.n, ptr(dx), ptr(dy), ptr(arg), driver.ArgI32(nc),
		driver.ArgI32(dx.shape[2]*dx.shape[3]), driver.ArgI32(dy.shape[2]*dy.shape[3]))
}

// CrossEntropy computes the per-row loss of logits x [rows, classes] against Int32 labels and
// returns the softmax probabilities its backward needs (loss has rows elements).
func (d *Device) CrossEntropy(loss, x, labels *Tensor) (*Tensor, error) {
	r, c := rowsCols(x)
	if x.dtype != Float32 || labels.dtype != Int32 || labels.n != r || loss.n != r {
		return nil, fmt.Errorf("cuda: device %d: cross entropy: x %v, labels %v %v, loss %v", d.ordinal, x.shape, labels.dtype, labels.shape, loss.shape)
	}
	prob, err := d.Alloc(Float32, x.shape...)
	if err != nil {
		return nil, err
	}
	if err := d.launchRows("cross_entropy_f32", r, ptr(loss), ptr(prob), ptr(x), ptr(labels), driver.ArgI32(r), driver.ArgI32(c)); err != nil {
		prob.Free()
		return nil, err
	}
	return prob, nil
}

// CrossEntropyBackward computes dx = scale·(prob − onehot(labels)); scale is 1/rows for the
// mean loss.
func (d *Device) CrossEntropyBackward(dx, prob, labels *Tensor, scale float32) error {
	if err := d.check("cross entropy backward", Float32, dx, prob); err != nil {
		return err
	}
	r, c := rowsCols(prob)
	return d.launch("cross_entropy_bwd_f32", dx.n, ptr(dx), ptr(prob), ptr(labels), driver.ArgI32(r), driver.ArgI32(c), driver.ArgF32(scale))
}

// AddBias adds b [cols] to every row of y [rows, cols] in place.
func (d *Device) AddBias(y, b *Tensor) error {
	r, c := rowsCols(y)
	if err := d.checkVec("add bias", c, b); err != nil {
		return err
	}
	return d.launch("add_bias_rows_f32", y.n, ptr(y), ptr(b), driver.ArgI32(r), driver.ArgI32(c))
}
