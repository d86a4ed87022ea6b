package tape

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// lowerBatchNorm: batch statistics and the running update in training, the running
// statistics in eval (BNState.Training is read at every Run, as on the CPU).
func (p *Program) lowerBatchNorm(n *G.Node, d ops.Desc) (*kernel, error) {
	st := d.BN
	if !d.Affine {
		return nil, fmt.Errorf("BatchNorm without gamma and beta has no device kernel: use an affine BatchNorm, or run on the CPU")
	}
	c := d.In[1]
	shape4 := []int{d.In[0], c, 1, 1}
	if len(d.In) == 4 {
		shape4 = d.In
	}
	l := p.bn.add(st, c) // Note [Running statistics on the device] (bnstats.go)
	s, relu := p.state(n.Op()), d.ReLU
	mom, eps := float32(st.Momentum), float32(st.Eps)
	return &kernel{kernels: []string{"batchnorm_stats_f32", "batchnorm_apply_f32", "batchnorm_running_f32", "relu_f32"},
		run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			rm, rv := l.mean, l.vr
			xv, err := view(x[0], shape4...)
			if err != nil {
				return err
			}
			y, err := view(out, shape4...)
			if err != nil {
				return err
			}
			if st.Training {
				if st.Reducer != nil { // Note [SyncBatchNorm on the device] (syncbn.go)
					if err := p.syncBNForward(dev, y, xv, x[1], x[2], rm, rv, st, s, mom, eps); err != nil {
						return err
					}
					l.trained = true
					st.NumBatchesTracked[0]++
					if relu {
						return dev.ReLU(out, out)
					}
					return nil
				}
				if d.In[0]*shape4[2]*shape4[3] <= 1 {
					return fmt.Errorf("input %v: expected more than 1 value per channel when training", d.In)
				}
				sv, err := dev.BatchNormTrain(y, xv, x[1], x[2], rm, rv, mom, eps)
				if sv.Mean != nil {
					p.runOwned = append(p.runOwned, sv.Mean, sv.Var)
				}
				if err != nil {
					return err
				}
				s.a, s.b, s.sync, l.trained = sv.Mean, sv.Var, nil, true
				st.NumBatchesTracked[0]++
			} else {
				s.a, s.b, s.sync = nil, nil, nil
				if err := dev.BatchNormApply(y, xv, x[1], x[2], rm, rv, eps); err != nil {
					return err
				}
			}
			if relu {
				return dev.ReLU(out, out)
			}
			return nil
		}}, nil
}

// lowerBatchNormGrad: inputs x, dy (or x, y, dy after BatchNormReLU), and the forward's
// gamma; dgamma and dbeta are left in the forward's state for the stash nodes.
func (p *Program) lowerBatchNormGrad(d ops.Desc) (*kernel, error) {
	fn := p.nodeOf[d.Fwd]
	if fn == nil || !d.Affine {
		return nil, fmt.Errorf("BatchNorm backward without its forward's gamma")
	}
	gamma := p.inputsOf[fn][1]
	s, relu, eps := p.state(d.Fwd), d.ReLU, float32(d.Eps)
	c := d.In[1]
	shape4 := []int{d.In[0], c, 1, 1}
	if len(d.In) == 4 {
		shape4 = d.In
	}
	return &kernel{extra: []*G.Node{gamma}, kernels: []string{"batchnorm_bwd_f32", "relu_bwd_f32"},
		run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			if s.a == nil {
				return fmt.Errorf("the backward of an eval-mode BatchNorm has no device kernel: differentiate a train-mode graph, or run on the CPU")
			}
			dy := x[len(x)-2]
			if relu {
				m, err := dev.Alloc(cuda.Float32, d.In...)
				if err != nil {
					return err
				}
				defer m.Free()
				if err := dev.ReLUBackward(m, dy, x[1]); err != nil {
					return err
				}
				dy = m
			}
			var err error
			if s.dgamma, err = p.runAlloc(c); err != nil {
				return err
			}
			if s.dbeta, err = p.runAlloc(c); err != nil {
				return err
			}
			xv, err := view(x[0], shape4...)
			if err != nil {
				return err
			}
			dyv, err := view(dy, shape4...)
			if err != nil {
				return err
			}
			dx, err := view(out, shape4...)
			if err != nil {
				return err
			}
			if s.sync != nil {
				return p.syncBNBackward(dev, dx, dyv, xv, x[len(x)-1], s, eps)
			}
			return dev.BatchNormBackward(dx, s.dgamma, s.dbeta, dyv, xv, x[len(x)-1], cuda.BatchNormSaved{Mean: s.a, Var: s.b}, eps)
		}}, nil
}

// lowerLayerNorm: x viewed [rows, m] over its last NormDims dims.
func (p *Program) lowerLayerNorm(n *G.Node, d ops.Desc) (*kernel, error) {
	m := prod(d.In[len(d.In)-d.NormDims:])
	rows := prod(d.In) / max(m, 1)
	s, eps, affine := p.state(n.Op()), float32(d.Eps), d.Affine
	return &kernel{kernels: []string{"layernorm_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		xv, err := view(x[0], rows, m)
		if err != nil {
			return err
		}
		y, err := view(out, rows, m)
		if err != nil {
			return err
		}
		var g, b *cuda.Tensor
		if affine {
			if g, err = view(x[1], m); err != nil {
				return err
			}
			if b, err = view(x[2], m); err != nil {
				return err
			}
		}
		sv, err := dev.LayerNorm(y, xv, g, b, eps)
		if sv.Mean != nil {
			p.runOwned = append(p.runOwned, sv.Mean, sv.Rstd)
		}
		s.a, s.b = sv.Mean, sv.Rstd
		return err
	}}, nil
}

// lowerLayerNormGrad: inputs x, dy, and the forward's gamma when affine.
func (p *Program) lowerLayerNormGrad(d ops.Desc) (*kernel, error) {
	fn := p.nodeOf[d.Fwd]
	if fn == nil {
		return nil, fmt.Errorf("LayerNorm backward without its forward")
	}
	m := prod(d.In[len(d.In)-d.NormDims:])
	rows := prod(d.In) / max(m, 1)
	s, affine := p.state(d.Fwd), d.Affine
	k := &kernel{kernels: []string{"layernorm_bwd_f32", "layernorm_bwd_params_f32"}}
	if affine {
		k.extra = []*G.Node{p.inputsOf[fn][1]}
	}
	k.run = func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		if s.a == nil {
			return fmt.Errorf("the LayerNorm forward has not run")
		}
		xv, err := view(x[0], rows, m)
		if err != nil {
			return err
		}
		dy, err := view(x[1], rows, m)
		if err != nil {
			return err
		}
		dx, err := view(out, rows, m)
		if err != nil {
			return err
		}
		var g *cuda.Tensor
		if affine {
			if g, err = view(x[2], m); err != nil {
				return err
			}
			if s.dgamma, err = p.runAlloc(m); err != nil {
				return err
			}
			if s.dbeta, err = p.runAlloc(m); err != nil {
				return err
			}
		}
		return dev.LayerNormBackward(dx, s.dgamma, s.dbeta, dy, xv, g, cuda.LayerNormSaved{Mean: s.a, Rstd: s.b})
	}
	return k, nil
}
