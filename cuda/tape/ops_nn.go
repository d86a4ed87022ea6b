package tape

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// The project's own ops (package nn/ops, and the ops.Describers of other packages),
// recognised by ops.Describe. A backward op that needs what its forward computed (saved
// statistics, the dropout key, the gradients of gamma and beta) finds it in the forward op's
// saved state, which lives until the end of the Run.

// saved is what a forward op leaves for its backward ops during one Run.
type saved struct {
	a, b          *cuda.Tensor // norms: mean and variance (BN) or 1/std (LN); attention: probabilities
	dgamma, dbeta *cuda.Tensor // norms: parameter gradients; attention: the bias table's (dgamma)
	key           uint64       // dropout: the mask key of this Run's forward
	half          *half        // autocast: a Round's 16-bit copy (ops_amp.go), looked up at Compile
	sync          *bnSync      // SyncBatchNorm: the global statistics (syncbn.go)
}

// state returns op's saved state, created on first use.
func (p *Program) state(op G.Op) *saved {
	s := p.saved[op]
	if s == nil {
		s = &saved{}
		p.saved[op] = s
	}
	return s
}

// runAlloc allocates a tensor that lives until the end of the Run.
func (p *Program) runAlloc(shape ...int) (*cuda.Tensor, error) {
	t, err := p.dev.Alloc(cuda.Float32, shape...)
	if err == nil {
		p.runOwned = append(p.runOwned, t)
	}
	return t, err
}

func view(t *cuda.Tensor, shape ...int) (*cuda.Tensor, error) { return t.View(0, shape...) }

// lowerNN lowers an op described by d (ops.Describe: nn/ops's own or an ops.Describer's).
func (p *Program) lowerNN(n *G.Node, d ops.Desc, in []*G.Node) (*kernel, error) {
	switch d.Kind {
	case ops.KindLinear:
		return p.lowerLinear(d)
	case ops.KindLinearGradX, ops.KindLinearGradW:
		rows, inF, outF, wrtW := d.Rows, d.InF, d.OutF, d.Kind == ops.KindLinearGradW
		return &kernel{run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			dy, err := view(x[1], rows, outF)
			if err != nil {
				return err
			}
			if wrtW { // dw [out, in] = dyᵀ·x
				xv, err := view(x[0], rows, inF)
				if err != nil {
					return err
				}
				return dev.MatMul(out, dy, xv, true, false, 1, 0)
			}
			dx, err := view(out, rows, inF) // dx = dy·w
			if err != nil {
				return err
			}
			return dev.MatMul(dx, dy, x[0], false, false, 1, 0)
		}}, nil
	case ops.KindBiasGrad:
		return lowerBiasGrad(d.N, d.C, d.Inner), nil
	case ops.KindConv2d, ops.KindConv2dGradX, ops.KindConv2dGradW:
		return lowerConv(d)
	case ops.KindBatchNorm:
		return p.lowerBatchNorm(n, d)
	case ops.KindBatchNormGrad:
		return p.lowerBatchNormGrad(d)
	case ops.KindLayerNorm:
		return p.lowerLayerNorm(n, d)
	case ops.KindLayerNormGrad:
		return p.lowerLayerNormGrad(d)
	case ops.KindNormGradGamma, ops.KindNormGradBeta:
		// The input is the norm's backward, whose op names the forward holding the gradients.
		gd, ok := ops.Describe(in[0].Op())
		if in[0].Op() == nil || !ok || gd.Fwd == nil {
			return nil, fmt.Errorf("the gradient of a norm's parameter after %v, not after the norm's backward", in[0].Op())
		}
		s, beta := p.state(gd.Fwd), d.Kind == ops.KindNormGradBeta
		return &kernel{kernels: []string{"scale_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, _ []*cuda.Tensor) error {
			src := s.dgamma
			if beta {
				src = s.dbeta
			}
			if src == nil {
				return fmt.Errorf("the norm's backward has not run")
			}
			return dev.Scale(out, src, 1)
		}}, nil
	case ops.KindReLU:
		return &kernel{kernels: []string{"relu_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.ReLU(out, x[0])
		}}, nil
	case ops.KindGELU:
		return &kernel{kernels: []string{"gelu_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.GELU(out, x[0])
		}}, nil
	case ops.KindReLUGrad: // inputs x (or ReLU's output y: y > 0 exactly where x > 0), dy
		return &kernel{kernels: []string{"relu_bwd_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.ReLUBackward(out, x[1], x[0])
		}}, nil
	case ops.KindGELUGrad:
		return &kernel{kernels: []string{"gelu_bwd_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.GELUBackward(out, x[1], x[0])
		}}, nil
	case ops.KindAddReLU:
		return &kernel{kernels: []string{"add_f32", "relu_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			if err := dev.Add(out, x[0], x[1]); err != nil {
				return err
			}
			return dev.ReLU(out, out)
		}}, nil
	case ops.KindAdd:
		return lowerAdd(d)
	case ops.KindReduce:
		return lowerReduce(d)
	case ops.KindExpand:
		return lowerExpand(d)
	case ops.KindCrossEntropy:
		rows, s := d.N, float32(d.Smoothing)
		return &kernel{kernels: []string{"cross_entropy_ls_f32", "sum_axis_f32", "scale_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			loss, err := dev.Alloc(cuda.Float32, rows)
			if err != nil {
				return err
			}
			defer loss.Free()
			if err := dev.CrossEntropySmoothed(loss, x[0], x[1], s); err != nil {
				return err
			}
			if err := dev.SumAxis(out, loss, 1, rows, 1); err != nil {
				return err
			}
			return dev.Scale(out, out, 1/float32(rows))
		}}, nil
	case ops.KindCrossEntropyGrad:
		s := float32(d.Smoothing)
		return &kernel{kernels: []string{"cross_entropy_ls_bwd_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.CrossEntropySmoothedBackward(out, x[0], x[1], x[2], s)
		}}, nil
	case ops.KindMaxPool2d, ops.KindMaxPool2dGrad:
		return lowerMaxPool(d)
	case ops.KindAvgPool:
		return &kernel{kernels: []string{"avgpool_global_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.GlobalAvgPool(out, x[0])
		}}, nil
	case ops.KindAvgPoolGrad:
		return &kernel{kernels: []string{"avgpool_global_bwd_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.GlobalAvgPoolBackward(out, x[0])
		}}, nil
	case ops.KindDropout, ops.KindDropoutGrad:
		m, fwd := d.Drop, n.Op()
		if d.Kind == ops.KindDropoutGrad {
			fwd = d.Fwd
		}
		s, draw := p.state(fwd), d.Kind == ops.KindDropout
		return &kernel{kernels: []string{"dropout_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			if draw {
				s.key = m.Next()
			}
			return dev.Dropout(out, x[0], s.key, m.Threshold(), m.Scale(), m.Row)
		}}, nil
	case ops.KindSoftmax, ops.KindSoftmaxGrad:
		if d.Log || d.Inner2 != 1 {
			return nil, fmt.Errorf("softmax over a middle axis or log-softmax (%v, axis of %d, inner %d) has no device kernel: softmax runs on the device over the last axis (move the axis last), or train this model on the CPU", d.In, d.Axis, d.Inner2)
		}
		if d.Kind == ops.KindSoftmax {
			return &kernel{kernels: []string{"softmax_rows_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
				return dev.Softmax(out, x[0])
			}}, nil
		}
		return &kernel{kernels: []string{"softmax_bwd_rows_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.SoftmaxBackward(out, x[0], x[1])
		}}, nil
	case ops.KindWindowAttention, ops.KindWindowAttentionGrad, ops.KindWindowAttentionTableGrad,
		ops.KindGatherRows, ops.KindScatterAddRows, ops.KindPermute:
		return p.lowerWindow(n, d)
	}
	return nil, errNoKernel
}

// lowerLinear: y [rows, out] = x [rows, in] · wᵀ (+ b on every row).
func (p *Program) lowerLinear(d ops.Desc) (*kernel, error) {
	rows, inF, outF, bias := d.Rows, d.InF, d.OutF, d.Bias
	k := &kernel{run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		xv, err := view(x[0], rows, inF)
		if err != nil {
			return err
		}
		y, err := view(out, rows, outF)
		if err != nil {
			return err
		}
		if err := dev.MatMul(y, xv, x[1], false, true, 1, 0); err != nil {
			return err
		}
		if bias {
			return dev.AddBias(y, x[2])
		}
		return nil
	}}
	if bias {
		k.kernels = []string{"add_bias_rows_f32"}
	}
	return k, nil
}

// lowerBiasGrad sums dy [n, c, inner] over n and inner.
func lowerBiasGrad(n, c, inner int) *kernel {
	return &kernel{kernels: []string{"sum_axis_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		src := x[0]
		if inner != 1 {
			t, err := dev.Alloc(cuda.Float32, n*c)
			if err != nil {
				return err
			}
			defer t.Free()
			if err := dev.SumAxis(t, src, n*c, inner, 1); err != nil {
				return err
			}
			src = t
		}
		return dev.SumAxis(out, src, 1, n, c)
	}}
}

func lowerConv(d ops.Desc) (*kernel, error) {
	g := d.Conv
	if g.Groups != 1 {
		return nil, fmt.Errorf("a grouped convolution (groups %d) has no device kernel: use groups 1 (or a convolution per group), or train this model on the CPU", g.Groups)
	}
	cp := cuda.Conv2dParams{StrideH: g.SH, StrideW: g.SW, PadH: g.PH, PadW: g.PW, DilH: g.DH, DilW: g.DW}
	switch d.Kind {
	case ops.KindConv2dGradX: // inputs w, dy; dx stands for x's shape
		return &kernel{run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.Conv2dBackward(out, nil, x[1], out, x[0], cp, 0)
		}}, nil
	case ops.KindConv2dGradW: // inputs x, dy; dw stands for w's shape
		return &kernel{run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.Conv2dBackward(nil, out, x[1], x[0], out, cp, 0)
		}}, nil
	}
	bias := d.Bias
	k := &kernel{run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		if err := dev.Conv2d(out, x[0], x[1], cp, 0); err != nil {
			return err
		}
		if bias {
			return dev.AddBroadcast(out, out, x[2], g.Out, g.OH*g.OW, 1)
		}
		return nil
	}}
	if bias {
		k.kernels = []string{"add_bcast_f32"}
	}
	return k, nil
}

// lowerMaxPool: the forward, or its gradient from (x, dy), which runs the forward again for
// the argmax (one pass over x; the CPU op shares a scratch instead).
func lowerMaxPool(d ops.Desc) (*kernel, error) {
	g, grad := d.Conv, d.Kind == ops.KindMaxPool2dGrad
	cp := cuda.Conv2dParams{StrideH: g.SH, StrideW: g.SW, PadH: g.PH, PadW: g.PW}
	return &kernel{kernels: []string{"maxpool_f32", "maxpool_bwd_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		xv, err := view(x[0], g.N, g.C, g.H, g.W)
		if err != nil {
			return err
		}
		y := out
		if grad {
			if y, err = dev.Alloc(cuda.Float32, g.N, g.C, g.OH, g.OW); err != nil {
				return err
			}
			defer y.Free()
		}
		arg, err := dev.MaxPool2d(y, xv, g.KH, g.KW, cp)
		if err != nil {
			return err
		}
		defer arg.Free()
		if !grad {
			return nil
		}
		dy, err := view(x[1], g.N, g.C, g.OH, g.OW)
		if err != nil {
			return err
		}
		return dev.MaxPool2dBackward(out, dy, arg)
	}}, nil
}

// lowerAdd: equal shapes, or an operand broadcast first (repeat passes into a temporary).
func lowerAdd(d ops.Desc) (*kernel, error) {
	ba, err := broadcastPasses(d.A, d.Out)
	if err != nil {
		return nil, err
	}
	bb, err := broadcastPasses(d.B, d.Out)
	if err != nil {
		return nil, err
	}
	return &kernel{kernels: []string{"add_f32", "repeat_axis_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		a, freeA, err := runPasses(dev, x[0], ba)
		if err != nil {
			return err
		}
		defer freeA()
		b, freeB, err := runPasses(dev, x[1], bb)
		if err != nil {
			return err
		}
		defer freeB()
		return dev.Add(out, a, b)
	}}, nil
}

// pass is one repeat over [outer, dim, inner] by rep, or (sum) one sum of [outer, k, inner]
// over k.
type pass struct{ outer, dim, rep, inner int }

// broadcastPasses returns the repeats that broadcast shape s (NumPy's alignment at the end)
// to out, one per axis of size 1 that grows.
func broadcastPasses(s, out []int) ([]pass, error) {
	full := make([]int, len(out))
	for i := range full {
		j := i - (len(out) - len(s))
		full[i] = 1
		if j >= 0 {
			full[i] = s[j]
		}
	}
	var ps []pass
	cur := full
	for i := range out {
		if cur[i] == out[i] {
			continue
		}
		if cur[i] != 1 {
			return nil, fmt.Errorf("shape %v does not broadcast to %v", s, out)
		}
		ps = append(ps, pass{outer: prod(cur[:i]), dim: 1, rep: out[i], inner: prod(cur[i+1:])})
		cur = append(append(append([]int(nil), cur[:i]...), out[i]), cur[i+1:]...)
	}
	return ps, nil
}

// runPasses applies repeat passes to x; free returns the temporaries.
func runPasses(dev *cuda.Device, x *cuda.Tensor, ps []pass) (*cuda.Tensor, func(), error) {
	var tmps []*cuda.Tensor
	free := func() {
		for _, t := range tmps {
			t.Free()
		}
	}
	for _, q := range ps {
		t, err := dev.Alloc(cuda.Float32, q.outer*q.dim*q.rep*q.inner)
		if err != nil {
			free()
			return nil, func() {}, err
		}
		tmps = append(tmps, t)
		if err := dev.Repeat(t, x, q.outer, q.dim, q.rep, q.inner); err != nil {
			free()
			return nil, func() {}, err
		}
		x = t
	}
	return x, free, nil
}

// reducePasses returns the sums over the runs of adjacent reduced axes of in, the last first,
// and the count of reduced elements.
func reducePasses(in []int, red []bool) ([]pass, int) {
	var ps []pass
	cur := append([]int(nil), in...)
	count := 1
	curRed := append([]bool(nil), red...)
	for hi := len(cur) - 1; hi >= 0; hi-- {
		if !curRed[hi] {
			continue
		}
		lo := hi
		for lo > 0 && curRed[lo-1] {
			lo--
		}
		k := prod(cur[lo : hi+1])
		count *= k
		ps = append(ps, pass{outer: prod(cur[:lo]), dim: k, inner: prod(cur[hi+1:])})
		cur = append(cur[:lo:lo], cur[hi+1:]...)
		curRed = append(curRed[:lo:lo], curRed[hi+1:]...)
		hi = lo
	}
	return ps, count
}

// lowerReduce: sum passes, then the mean's division.
func lowerReduce(d ops.Desc) (*kernel, error) {
	ps, count := reducePasses(d.In, d.Reduced)
	mean := d.Mean
	return &kernel{kernels: []string{"sum_axis_f32", "scale_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		src := x[0]
		for i, q := range ps {
			dst := out
			if i < len(ps)-1 {
				t, err := dev.Alloc(cuda.Float32, q.outer*q.inner)
				if err != nil {
					return err
				}
				defer t.Free()
				dst = t
			}
			if err := dev.SumAxis(dst, src, q.outer, q.dim, q.inner); err != nil {
				return err
			}
			src = dst
		}
		if len(ps) == 0 {
			return dev.Scale(out, src, 1)
		}
		if mean {
			return dev.Scale(out, out, float32(1/float64(count)))
		}
		return nil
	}}, nil
}

// lowerExpand: the reduce passes undone in reverse order as repeats, then the mean's
// division.
func lowerExpand(d ops.Desc) (*kernel, error) {
	ps, count := reducePasses(d.In, d.Reduced)
	mean := d.Mean
	return &kernel{kernels: []string{"repeat_axis_f32", "scale_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		src := x[0]
		for i := len(ps) - 1; i >= 0; i-- {
			q := ps[i]
			dst := out
			if i > 0 {
				t, err := dev.Alloc(cuda.Float32, q.outer*q.dim*q.inner)
				if err != nil {
					return err
				}
				defer t.Free()
				dst = t
			}
			if err := dev.Repeat(dst, src, q.outer, 1, q.dim, q.inner); err != nil {
				return err
			}
			src = dst
		}
		if len(ps) == 0 {
			return dev.Scale(out, src, 1)
		}
		if mean {
			return dev.Scale(out, out, float32(1/float64(count)))
		}
		return nil
	}}, nil
}
