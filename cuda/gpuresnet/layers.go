package gpuresnet

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/internal/modelstep"
	"github.com/gorgonia-parallel/gp/models/resnet"
)

type (
	backFn = modelstep.BackFn
	tape   = modelstep.Tape
)

// forward runs the stem, the four stages, pooling and the classifier.
func (r *ResNet) forward(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	var backs []backFn
	push := func(y *cuda.Tensor, b backFn, err error) (*cuda.Tensor, error) {
		backs = append(backs, b)
		return y, err
	}
	y, err := push(r.conv(t, x, "conv1", 2, true))
	if err == nil {
		y, err = push(r.bn(t, y, "bn1"))
	}
	if err == nil {
		y, err = push(r.relu(t, y))
	}
	if err == nil {
		y, err = push(r.maxpool(t, y))
	}
	for s := 0; s < 4 && err == nil; s++ {
		for b := 0; b < r.cfg.Layers[s] && err == nil; b++ {
			stride := 1
			if s > 0 && b == 0 {
				stride = 2
			}
			y, err = push(r.block(t, y, fmt.Sprintf("layer%d.%d", s+1, b), stride))
		}
	}
	if err == nil {
		y, err = push(r.pool(t, y))
	}
	if err == nil {
		y, err = push(r.fc(t, y))
	}
	if err != nil {
		return nil, nil, err
	}
	return y, modelstep.Backward(backs), nil
}

// conv is a bias-free convolution with padding kernel/2; first marks the stem, whose input
// gradient is not needed.
func (r *ResNet) conv(t *tape, x *cuda.Tensor, name string, stride int, first bool) (*cuda.Tensor, backFn, error) {
	w, ok := r.st.Param[name+".weight"]
	if !ok {
		return nil, nil, fmt.Errorf("gpuresnet: no parameter %s.weight", name)
	}
	ws, xs := w.Shape(), x.Shape()
	p := cuda.Conv2dParams{StrideH: stride, StrideW: stride, PadH: ws[2] / 2, PadW: ws[3] / 2}
	oh, ow := p.OutSize(xs[2], xs[3], ws[2], ws[3])
	y := t.Alloc(cuda.Float32, xs[0], ws[0], oh, ow)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := r.st.Dev.Conv2d(y, x, w, p, r.amp); err != nil {
		return nil, nil, fmt.Errorf("gpuresnet: %s: %w", name, err)
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		var dx *cuda.Tensor
		if !first {
			if dx = t.Alloc(cuda.Float32, xs...); t.Err != nil {
				return nil, t.Err
			}
		}
		if err := r.st.Dev.Conv2dBackward(dx, r.st.Grad[name+".weight"], dy, x, w, p, r.amp); err != nil {
			return nil, fmt.Errorf("gpuresnet: %s backward: %w", name, err)
		}
		return dx, nil
	}, nil
}

// bn is training-mode BatchNorm2d (eps 1e-5, momentum 0.1, as nn.BatchNorm2d's defaults).
func (r *ResNet) bn(t *tape, x *cuda.Tensor, name string) (*cuda.Tensor, backFn, error) {
	const eps, momentum = 1e-5, 0.1
	g, b := r.st.Param[name+".weight"], r.st.Param[name+".bias"]
	if g == nil || b == nil {
		return nil, nil, fmt.Errorf("gpuresnet: no parameters %s.weight/bias", name)
	}
	y := t.Alloc(cuda.Float32, x.Shape()...)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if !t.Train {
		mean, v := r.st.Buf[name+".running_mean"], r.st.Buf[name+".running_var"]
		if err := r.st.Dev.BatchNormApply(y, x, g, b, mean, v, eps); err != nil {
			return nil, nil, fmt.Errorf("gpuresnet: %s: %w", name, err)
		}
		return y, nil, nil
	}
	saved, err := r.st.Dev.BatchNormTrain(y, x, g, b, r.st.Buf[name+".running_mean"], r.st.Buf[name+".running_var"], momentum, eps)
	if err != nil {
		return nil, nil, fmt.Errorf("gpuresnet: %s: %w", name, err)
	}
	t.OnRelease(saved.Free)
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, x.Shape()...)
		if t.Err != nil {
			return nil, t.Err
		}
		if err := r.st.Dev.BatchNormBackward(dx, r.st.Grad[name+".weight"], r.st.Grad[name+".bias"], dy, x, g, saved, eps); err != nil {
			return nil, fmt.Errorf("gpuresnet: %s backward: %w", name, err)
		}
		return dx, nil
	}, nil
}

func (r *ResNet) relu(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	return modelstep.Pointwise(t, x, r.st.Dev.ReLU, r.st.Dev.ReLUBackward)
}

func (r *ResNet) maxpool(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	p := cuda.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}
	xs := x.Shape()
	oh, ow := p.OutSize(xs[2], xs[3], 3, 3)
	y := t.Alloc(cuda.Float32, xs[0], xs[1], oh, ow)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	arg, err := r.st.Dev.MaxPool2d(y, x, 3, 3, p)
	if err != nil {
		return nil, nil, err
	}
	t.Keep(arg)
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, xs...)
		if t.Err != nil {
			return nil, t.Err
		}
		return dx, r.st.Dev.MaxPool2dBackward(dx, dy, arg)
	}, nil
}

// block is a BasicBlock or Bottleneck: relu(main(x) + identity(x)).
func (r *ResNet) block(t *tape, x *cuda.Tensor, prefix string, stride int) (*cuda.Tensor, backFn, error) {
	nconv := 2
	if r.cfg.Block == resnet.Bottleneck {
		nconv = 3
	}
	var backs []backFn
	h := x
	var err error
	for i := 1; i <= nconv && err == nil; i++ {
		s := 1
		if (r.cfg.Block == resnet.Basic && i == 1) || (r.cfg.Block == resnet.Bottleneck && i == 2) {
			s = stride
		}
		var b backFn
		if h, b, err = r.conv(t, h, fmt.Sprintf("%s.conv%d", prefix, i), s, false); err != nil {
			break
		}
		backs = append(backs, b)
		if h, b, err = r.bn(t, h, fmt.Sprintf("%s.bn%d", prefix, i)); err != nil {
			break
		}
		backs = append(backs, b)
		if i < nconv {
			if h, b, err = r.relu(t, h); err == nil {
				backs = append(backs, b)
			}
		}
	}
	if err != nil {
		return nil, nil, err
	}
	id := x
	var idBacks []backFn
	if _, ok := r.st.Param[prefix+".downsample.0.weight"]; ok {
		var b backFn
		if id, b, err = r.conv(t, x, prefix+".downsample.0", stride, false); err != nil {
			return nil, nil, err
		}
		idBacks = append(idBacks, b)
		if id, b, err = r.bn(t, id, prefix+".downsample.1"); err != nil {
			return nil, nil, err
		}
		idBacks = append(idBacks, b)
	}
	sum := t.Alloc(cuda.Float32, h.Shape()...)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := r.st.Dev.Add(sum, h, id); err != nil {
		return nil, nil, fmt.Errorf("gpuresnet: %s residual: %w", prefix, err)
	}
	y, reluBack, err := r.relu(t, sum)
	if err != nil {
		return nil, nil, err
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		ds, err := reluBack(dy)
		if err != nil {
			return nil, err
		}
		dm := ds
		for i := len(backs) - 1; i >= 0; i-- {
			if dm, err = backs[i](dm); err != nil {
				return nil, err
			}
		}
		did := ds
		for i := len(idBacks) - 1; i >= 0; i-- {
			if did, err = idBacks[i](did); err != nil {
				return nil, err
			}
		}
		dx := t.Alloc(cuda.Float32, x.Shape()...)
		if t.Err != nil {
			return nil, t.Err
		}
		return dx, r.st.Dev.Add(dx, dm, did)
	}, nil
}

// pool is the global average pool to [N, C].
func (r *ResNet) pool(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	xs := x.Shape()
	y := t.Alloc(cuda.Float32, xs[0], xs[1])
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := r.st.Dev.GlobalAvgPool(y, x); err != nil {
		return nil, nil, err
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, xs...)
		if t.Err != nil {
			return nil, t.Err
		}
		return dx, r.st.Dev.GlobalAvgPoolBackward(dx, dy)
	}, nil
}

// fc is the classifier: logits = x·Wᵀ + b, W [classes, features].
func (r *ResNet) fc(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	w, b := r.st.Param["fc.weight"], r.st.Param["fc.bias"]
	if w == nil || b == nil {
		return nil, nil, fmt.Errorf("gpuresnet: no parameters fc.weight/bias")
	}
	n := x.Shape()[0]
	y := t.Alloc(cuda.Float32, n, w.Shape()[0])
	if t.Err != nil {
		return nil, nil, t.Err
	}
	var err error
	if r.amp == cuda.Float32 {
		err = r.st.Dev.MatMul(y, x, w, false, true, 1, 0)
	} else {
		err = r.st.Dev.MatMulAutocast(y, x, w, false, true, format(r.amp))
	}
	if err == nil {
		err = r.st.Dev.AddBias(y, b)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("gpuresnet: fc: %w", err)
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, x.Shape()...)
		if t.Err != nil {
			return nil, t.Err
		}
		var err error
		if r.amp == cuda.Float32 {
			err = r.st.Dev.MatMul(dx, dy, w, false, false, 1, 0)
			if err == nil {
				err = r.st.Dev.MatMul(r.st.Grad["fc.weight"], dy, x, true, false, 1, 0)
			}
		} else {
			err = r.st.Dev.MatMulAutocast(dx, dy, w, false, false, format(r.amp))
			if err == nil {
				err = r.st.Dev.MatMulAutocast(r.st.Grad["fc.weight"], dy, x, true, false, format(r.amp))
			}
		}
		if err == nil {
			err = r.st.Dev.SumCols(r.st.Grad["fc.bias"], dy)
		}
		if err != nil {
			return nil, fmt.Errorf("gpuresnet: fc backward: %w", err)
		}
		return dx, nil
	}, nil
}

func format(dt cuda.DType) cuda.Format {
	if dt == cuda.Float16 {
		return cuda.FP16
	}
	return cuda.BF16
}
