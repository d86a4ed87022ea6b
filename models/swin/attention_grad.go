package swin

import (
	"fmt"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/internal/simd"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// attnGradOp computes dqkv [Bw, N, 3C] from (qkv, dy) and the forward's probabilities, and
// leaves the bias gradient (summed over windows) in the forward op for attnTableGradOp.
type attnGradOp struct {
	opBase
	fwd *attnOp
	out outBuf
	s32 [][]float32 // per worker: dP/dS scratch [N, N]
	s64 [][]float64
	acc [][]float64 // per worker: bias gradient [heads, N, N]
}

func (op *attnGradOp) Arity() int    { return 2 }
func (op *attnGradOp) Type() hm.Type { return fnType(3, 3, 3) }
func (op *attnGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.fwd.bw, op.fwd.n, 3 * op.fwd.c}, nil
}

func (op *attnGradOp) Do(vals ...G.Value) (G.Value, error) {
	f := op.fwd
	if len(vals) != 2 {
		return nil, fmt.Errorf("%s: got %d inputs, want 2", op.name, len(vals))
	}
	qkv, err := dense(op.name, "qkv", vals[0], f.bw*f.n*3*f.c)
	if err != nil {
		return nil, err
	}
	dy, err := dense(op.name, "output gradient", vals[1], f.bw*f.n*f.c)
	if err != nil {
		return nil, err
	}
	dq := op.out.get(qkv.Dtype(), tensor.Shape{f.bw, f.n, 3 * f.c})
	if qkv.Dtype() == tensor.Float32 {
		if len(f.p32) != f.bw*f.heads*f.n*f.n {
			return nil, fmt.Errorf("%s: the forward has not run in float32", op.name)
		}
		attnBackward(op, data[float32](qkv), data[float32](dy), data[float32](dq), f.p32, &op.s32)
	} else {
		if len(f.p64) != f.bw*f.heads*f.n*f.n {
			return nil, fmt.Errorf("%s: the forward has not run in float64", op.name)
		}
		attnBackward(op, data[float64](qkv), data[float64](dy), data[float64](dq), f.p64, &op.s64)
	}
	return dq, nil
}

func attnBackward[T float](op *attnGradOp, qkv, dy, dq, p []T, scratch *[][]T) {
	f := op.fwd
	n, c, hd := f.n, f.c, f.c/f.heads
	nn := n * n
	scale := T(1 / float64Sqrt(hd))
	workers := min(f.bw, maxWorkers())
	for len(*scratch) < workers {
		*scratch = append(*scratch, make([]T, nn))
	}
	for len(op.acc) < workers {
		op.acc = append(op.acc, make([]float64, f.heads*nn))
	}
	q32, whole := any(qkv).([]float32)
	dy32, _ := any(dy).([]float32)
	dq32, _ := any(dq).([]float32)
	p32, _ := any(p).([]float32)
	whole = whole && !attnPerHead && simd.AttnWindowFits(n, hd)
	used := parallel(f.bw, func(w, lo, hi int) {
		ds := (*scratch)[w]
		acc := op.acc[w]
		clear(acc)
		for b := lo; b < hi; b++ {
			base, dbase := qkv[b*n*3*c:], dq[b*n*3*c:]
			// The window's heads in one call of the C kernels (the same bits as the loop).
			if whole && simd.AttnWindowBwd32(q32[b*n*3*c:], dy32[b*n*c:], dq32[b*n*3*c:], p32[b*f.heads*nn:],
				any(ds).([]float32), acc, f.heads, n, c, float32(scale)) {
				continue
			}
			for h := range f.heads {
				q, k, v := base[h*hd:], base[c+h*hd:], base[2*c+h*hd:]
				pr := p[(b*f.heads+h)*nn : (b*f.heads+h+1)*nn]
				do := dy[b*n*c+h*hd:]
				gemm(true, false, n, hd, n, 1, pr, n, do, c, 0, dbase[2*c+h*hd:], 3*c) // dV = Pᵀ dO
				gemm(false, true, n, n, hd, 1, do, c, v, 3*c, 0, ds, n)                // dP = dO Vᵀ
				softmaxBwd(pr, ds, acc[h*nn:(h+1)*nn], n)
				gemm(false, false, n, hd, n, scale, ds, n, k, 3*c, 0, dbase[h*hd:], 3*c)  // dQ = s dS K
				gemm(true, false, n, hd, n, scale, ds, n, q, 3*c, 0, dbase[c+h*hd:], 3*c) // dK = s dSᵀ Q
			}
		}
	})
	f.dBias = grow(f.dBias, f.heads*nn)
	clear(f.dBias)
	for w := range used {
		for i, v := range op.acc[w] {
			f.dBias[i] += v
		}
	}
}

// attnTableGradOp scatters the bias gradient [heads, N, N] into the table's layout [T, heads]
// through the relative position index. Its input (dqkv) only orders it after attnGradOp.
type attnTableGradOp struct {
	opBase
	fwd *attnOp
	out outBuf
}

func (op *attnTableGradOp) Arity() int    { return 1 }
func (op *attnTableGradOp) Type() hm.Type { return fnType(2, 3) }
func (op *attnTableGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.fwd.tRows, op.fwd.heads}, nil
}

func (op *attnTableGradOp) Do(vals ...G.Value) (G.Value, error) {
	f := op.fwd
	if len(vals) != 1 {
		return nil, fmt.Errorf("%s: got %d inputs, want 1", op.name, len(vals))
	}
	dq, err := dense(op.name, "qkv gradient", vals[0], -1)
	if err != nil {
		return nil, err
	}
	nn := f.n * f.n
	if len(f.dBias) != f.heads*nn {
		return nil, fmt.Errorf("%s: the attention backward has not run", op.name)
	}
	dt := op.out.get(dq.Dtype(), tensor.Shape{f.tRows, f.heads})
	if dq.Dtype() == tensor.Float32 {
		scatterTable(f, data[float32](dt))
	} else {
		scatterTable(f, data[float64](dt))
	}
	return dt, nil
}

func scatterTable[T float](f *attnOp, dt []T) {
	acc := make([]float64, len(dt))
	nn := f.n * f.n
	for h := range f.heads {
		for i, j := range f.relIdx {
			acc[int(j)*f.heads+h] += f.dBias[h*nn+i]
		}
	}
	for i, v := range acc {
		dt[i] = T(v)
	}
}

// softmaxBwd turns d, the gradient of the probabilities p (n×n, one window and head), into
// that of the scores, dS[i,j] = P[i,j]·(dP[i,j] - Σ_k P[i,k]·dP[i,k]) in float64, and adds
// dS into a (the relative-position bias table's gradient, before its scatter). float32 goes
// to the C kernel when there is one (internal/simd).
func softmaxBwd[T float](p, d []T, a []float64, n int) {
	if p32, ok := any(p).([]float32); ok && simd.SoftmaxBwd(p32, any(d).([]float32), a, n) {
		return
	}
	for i := range n {
		pi, di := p[i*n:(i+1)*n], d[i*n:(i+1)*n]
		var dot float64
		for j := range pi {
			dot += float64(pi[j]) * float64(di[j])
		}
		for j := range pi {
			g := float64(pi[j]) * (float64(di[j]) - dot)
			di[j] = T(g)
			a[i*n+j] += g
		}
	}
}
