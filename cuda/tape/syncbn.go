package tape

import (
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn/ops"
)

// Note [SyncBatchNorm on the device]: the arithmetic is nn/ops' SyncBatchNorm
// (BNState.Reducer), with the reducer on the host. Forward: each rank's per-channel mean and
// biased variance (the device's statistics kernel) are copied to the host as [sum | sum of
// squares | count], summed over the ranks by the reducer, and the global mean and variance
// copied back; the layer normalises with them and updates its running statistics with the
// global count. Backward: the backward kernel, given the global mean and variance, leaves
// the local Σdy·x̂ and Σdy in dgamma and dbeta (which stay local, as on the CPU); they are
// copied to the host as [Σdy | Σdy·(x-mean)], summed over the ranks, and dx = k1·dy +
// k2·(x-mean) + k3 per channel (ops' coefficients) is two launches of the normalisation
// kernel, each an affine map per channel, and an add. Each layer waits for the host twice a
// step, where the CPU op all-reduces.

// bnSync is what a SyncBatchNorm forward leaves its backward: the global variance (host),
// the count, and the reducer.
type bnSync struct {
	variance []float64
	count    float64
	red      ops.StatsReducer
}

// syncBNForward is the training forward of a SyncBatchNorm over NCHW x (Note [SyncBatchNorm
// on the device]).
func (p *Program) syncBNForward(dev *cuda.Device, y, x, gamma, beta, rm, rv *cuda.Tensor, st *ops.BNState, s *saved, mom, eps float32) error {
	sh := x.Shape()
	c, m := sh[1], float64(sh[0]*sh[2]*sh[3])
	mean, err := p.runAlloc(c)
	if err != nil {
		return err
	}
	vr, err := p.runAlloc(c)
	if err != nil {
		return err
	}
	if err := dev.BatchNormStats(mean, vr, x); err != nil {
		return err
	}
	hm, hv := make([]float32, c), make([]float32, c)
	if err := mean.CopyTo(p.runCtx, hm); err != nil {
		return err
	}
	if err := vr.CopyTo(p.runCtx, hv); err != nil {
		return err
	}
	buf := make([]float64, 2*c+1)
	for ch := range c {
		mu := float64(hm[ch])
		buf[ch], buf[c+ch] = m*mu, m*(float64(hv[ch])+mu*mu)
	}
	buf[2*c] = m
	if err := st.Reducer.ReduceStats(buf); err != nil {
		return fmt.Errorf("synchronising batch statistics: %w", err)
	}
	cnt := buf[2*c]
	if cnt <= 1 {
		return fmt.Errorf("expected more than 1 value per channel when training, got %v", cnt)
	}
	sy := &bnSync{variance: make([]float64, c), count: cnt, red: st.Reducer}
	for ch := range c {
		mu := buf[ch] / cnt
		v := max(buf[c+ch]/cnt-mu*mu, 0)
		hm[ch], hv[ch], sy.variance[ch] = float32(mu), float32(v), v
	}
	if err := mean.CopyFrom(hm); err != nil {
		return err
	}
	if err := vr.CopyFrom(hv); err != nil {
		return err
	}
	if err := dev.BatchNormApply(y, x, gamma, beta, mean, vr, eps); err != nil {
		return err
	}
	s.a, s.b, s.sync = mean, vr, sy
	return dev.BatchNormRunning(rm, rv, mean, vr, mom, cnt)
}

// syncBNBackward is the training backward of a SyncBatchNorm (Note [SyncBatchNorm on the
// device]): dx over the ranks' sums, dgamma and dbeta local.
func (p *Program) syncBNBackward(dev *cuda.Device, dx, dy, x, gamma *cuda.Tensor, s *saved, eps float32) error {
	sy := s.sync
	if sy == nil {
		return fmt.Errorf("SyncBatchNorm backward without its forward's statistics")
	}
	c := len(sy.variance)
	// The kernel's dx uses the local count; it is overwritten below.
	if err := dev.BatchNormBackward(dx, s.dgamma, s.dbeta, dy, x, gamma, cuda.BatchNormSaved{Mean: s.a, Var: s.b}, eps); err != nil {
		return err
	}
	hg, hb, hgam := make([]float32, c), make([]float32, c), make([]float32, c)
	for _, cp := range []struct {
		t   *cuda.Tensor
		dst []float32
	}{{s.dgamma, hg}, {s.dbeta, hb}, {gamma, hgam}} {
		if err := cp.t.CopyTo(p.runCtx, cp.dst); err != nil {
			return err
		}
	}
	istd := make([]float64, c)
	buf := make([]float64, 2*c)
	for ch := range c {
		istd[ch] = 1 / math.Sqrt(sy.variance[ch]+float64(eps))
		buf[ch], buf[c+ch] = float64(hb[ch]), float64(hg[ch])/istd[ch]
	}
	if err := sy.red.ReduceStats(buf); err != nil {
		return fmt.Errorf("synchronising gradient sums: %w", err)
	}
	// dx = γ·s·dy + a·(x-mean)·s + b, a = -γ·s²·Σdy·(x-mean)/N, b = -γ·s·Σdy/N.
	ha, hbeta := make([]float32, c), make([]float32, c)
	for ch := range c {
		g, sd := float64(hgam[ch]), istd[ch]
		ha[ch] = float32(-g * sd * sd * buf[c+ch] / sy.count)
		hbeta[ch] = float32(-g * sd * buf[ch] / sy.count)
	}
	var vecs [3]*cuda.Tensor
	for i := range vecs {
		var err error
		if vecs[i], err = p.runAlloc(c); err != nil {
			return err
		}
	}
	zero, a, b := vecs[0], vecs[1], vecs[2]
	if err := dev.Zero(zero); err != nil {
		return err
	}
	if err := a.CopyFrom(ha); err != nil {
		return err
	}
	if err := b.CopyFrom(hbeta); err != nil {
		return err
	}
	if err := dev.BatchNormApply(dx, dy, gamma, zero, zero, s.b, eps); err != nil {
		return err
	}
	t, err := dev.Alloc(cuda.Float32, x.Shape()...)
	if err != nil {
		return err
	}
	defer t.Free()
	if err := dev.BatchNormApply(t, x, a, b, s.a, s.b, eps); err != nil {
		return err
	}
	return dev.Add(dx, dx, t)
}
