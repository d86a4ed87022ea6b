package zero

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// Allocator gives an optimizer zeroed float32 memory for its state: Go heap memory, or a
// memory-mapped file under disk offload. name identifies the buffer ("exp_avg").
type Allocator interface {
	Alloc(name string, n int) ([]float32, error)
}

// OptimizerFunc builds the optimizer of a rank's shard over its segments, taking state
// memory from mem.
type OptimizerFunc func(segs []optim.Segment, mem Allocator) (optim.Optimizer, error)

// Optim adapts a constructor of package optim (optim.NewSGD, optim.NewAdamW, ...) to an
// OptimizerFunc. Such optimizers allocate their state on the Go heap themselves, so they
// cannot be combined with OffloadDisk (New fails).
func Optim(f func(segs []optim.Segment) (optim.Optimizer, error)) OptimizerFunc {
	return func(segs []optim.Segment, mem Allocator) (optim.Optimizer, error) {
		if _, ok := mem.(*fileAlloc); ok {
			return nil, fmt.Errorf("zero: an optimizer of package optim keeps its state on the heap; use zero.AdamW with OffloadDisk")
		}
		return f(segs)
	}
}

// AdamOption configures AdamW.
type AdamOption func(*adamConfig)

type adamConfig struct {
	beta1, beta2, eps float64
	workers, chunk    int
}

// Betas sets AdamW's running-average coefficients (default 0.9, 0.999).
func Betas(b1, b2 float64) AdamOption { return func(c *adamConfig) { c.beta1, c.beta2 = b1, b2 } }

// Eps sets AdamW's denominator term (default 1e-8).
func Eps(eps float64) AdamOption { return func(c *adamConfig) { c.eps = eps } }

// Workers splits the fused update across n goroutines in chunks of at least minChunk
// elements (n <= 0: GOMAXPROCS). The result is bit-identical for every n.
func Workers(n, minChunk int) AdamOption {
	return func(c *adamConfig) {
		if n <= 0 {
			n = runtime.GOMAXPROCS(0)
		}
		c.workers, c.chunk = n, max(minChunk, 1)
	}
}

// AdamW returns the fused sharded torch.optim.AdamW: one pass per element over every
// segment of the shard, split across goroutines, with the arithmetic of optim.NewAdamW
// (float32, step scalars in float64 then rounded), so it is bit-identical to optim's AdamW
// on the same segments. Its state (exp_avg, exp_avg_sq) comes from the engine's allocator:
// heap, or files under OffloadDisk. Its state dict uses optim's keys
// ("optim.<param>.exp_avg[lo:hi]"), so it loads into optim's optimizers and back.
func AdamW(lr float64, opts ...AdamOption) OptimizerFunc {
	c := adamConfig{beta1: 0.9, beta2: 0.999, eps: 1e-8, workers: 1, chunk: 1 << 15}
	for _, o := range opts {
		o(&c)
	}
	return func(segs []optim.Segment, mem Allocator) (optim.Optimizer, error) {
		if lr < 0 || c.beta1 < 0 || c.beta1 >= 1 || c.beta2 < 0 || c.beta2 >= 1 || c.eps < 0 {
			return nil, fmt.Errorf("%w: zero AdamW lr %g betas (%g, %g) eps %g", optim.ErrBadHyperparameter, lr, c.beta1, c.beta2, c.eps)
		}
		n := 0
		for _, s := range segs {
			n += len(s.Data)
		}
		m, err := mem.Alloc("exp_avg", n)
		if err != nil {
			return nil, err
		}
		v, err := mem.Alloc("exp_avg_sq", n)
		if err != nil {
			return nil, err
		}
		a := &ShardAdamW{segs: segs, lr: lr, cfg: c, m: m, v: v}
		off := 0
		for _, s := range segs {
			a.base = append(a.base, off)
			off += len(s.Data)
		}
		a.plan()
		return a, nil
	}
}

// ShardAdamW is the optimizer AdamW returns. It implements optim.Optimizer.
type ShardAdamW struct {
	segs   []optim.Segment
	base   []int // offset of each segment in m and v
	m, v   []float32
	lr     float64
	step   int64
	cfg    adamConfig
	chunks [][]chunk // per worker
}

type chunk struct{ seg, lo, hi int }

// plan splits the segments into per-worker lists of chunks of about equal size.
func (a *ShardAdamW) plan() {
	total := len(a.m)
	w := max(1, min(a.cfg.workers, total/a.cfg.chunk))
	per := (total + w - 1) / max(w, 1)
	a.chunks = make([][]chunk, w)
	k, filled := 0, 0
	for si, s := range a.segs {
		for lo := 0; lo < len(s.Data); {
			take := min(len(s.Data)-lo, max(per-filled, 1))
			a.chunks[k] = append(a.chunks[k], chunk{si, lo, lo + take})
			lo += take
			if filled += take; filled >= per && k < w-1 {
				k, filled = k+1, 0
			}
		}
	}
}

// Step applies one AdamW update to every segment.
func (a *ShardAdamW) Step() error {
	a.step++
	t := float64(a.step)
	c := a.cfg
	bc1 := 1 - math.Pow(c.beta1, t)
	bc2 := 1 - math.Pow(c.beta2, t)
	k := adamConsts{
		b1: float32(c.beta1), omb1: float32(1 - c.beta1),
		b2: float32(c.beta2), omb2: float32(1 - c.beta2),
		bc2sqrt: float32(math.Sqrt(bc2)), eps: float32(c.eps),
		negStep: float32(-(a.lr / bc1)),
	}
	decays := make([]float32, len(a.segs))
	for i, s := range a.segs {
		decays[i] = float32(1 - a.lr*s.WeightDecay)
	}
	run := func(list []chunk) {
		for _, ch := range list {
			s := a.segs[ch.seg]
			b := a.base[ch.seg]
			adamWKernel(&k, decays[ch.seg], s.Data[ch.lo:ch.hi], s.Grad[ch.lo:ch.hi], a.m[b+ch.lo:b+ch.hi], a.v[b+ch.lo:b+ch.hi])
		}
	}
	if len(a.chunks) == 1 {
		run(a.chunks[0])
		return nil
	}
	var wg sync.WaitGroup
	for _, list := range a.chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(list)
		}()
	}
	wg.Wait()
	return nil
}

type adamConsts struct {
	b1, omb1, b2, omb2, bc2sqrt, eps, negStep float32
}

// adamWKernel is optim's decoupled Adam kernel without maximize and amsgrad.
func adamWKernel(k *adamConsts, decay float32, p, g, m, v []float32) {
	for i := range p {
		gi := g[i]
		pi := p[i] * decay
		mi := m[i]*k.b1 + k.omb1*gi
		vi := v[i]*k.b2 + k.omb2*gi*gi
		m[i], v[i] = mi, vi
		denom := float32(math.Sqrt(float64(vi)))/k.bc2sqrt + k.eps
		p[i] = pi + k.negStep*mi/denom
	}
}

// ZeroGrad clears the gradients of every segment.
func (a *ShardAdamW) ZeroGrad() {
	for _, s := range a.segs {
		clear(s.Grad)
	}
}

// LR is the learning rate.
func (a *ShardAdamW) LR() float64 { return a.lr }

// SetLR changes the learning rate.
func (a *ShardAdamW) SetLR(lr float64) { a.lr = lr }

// Steps is the number of updates so far.
func (a *ShardAdamW) Steps() int64 { return a.step }

// StateDict returns optim's keys: "optim.step", "optim.lr" and per parameter slice
// "optim.<param>.exp_avg[lo:hi]" and "...exp_avg_sq[lo:hi]" (whole parameters unsliced).
// The entries alias the optimizer's memory.
func (a *ShardAdamW) StateDict() []nn.StateEntry {
	out := []nn.StateEntry{
		{Name: optim.KeyStep, Shape: []int{}, I64: []int64{a.step}},
		{Name: optim.KeyLR, Shape: []int{}, F64: []float64{a.lr}},
	}
	for si, s := range a.segs {
		b := a.base[si]
		for _, kind := range []string{"exp_avg", "exp_avg_sq"} {
			buf := a.m
			if kind == "exp_avg_sq" {
				buf = a.v
			}
			for _, p := range s.Parts {
				lo := b + p.SegOffset
				out = append(out, partEntry(optim.Prefix, "."+kind, p, buf[lo:lo+p.Len:lo+p.Len]))
			}
		}
	}
	return out
}

// LoadStateDict restores the step, learning rate and moments from entries saved by any
// sharding (sliced or whole keys).
func (a *ShardAdamW) LoadStateDict(entries []nn.StateEntry) error {
	idx := newPieceIndex(entries)
	st, ok := idx.whole[optim.KeyStep]
	if !ok || len(st.I64) != 1 {
		return fmt.Errorf("zero: AdamW state: %q missing", optim.KeyStep)
	}
	a.step = st.I64[0]
	if lr, ok := idx.whole[optim.KeyLR]; ok && len(lr.F64) == 1 {
		a.lr = lr.F64[0]
	}
	for si, s := range a.segs {
		b := a.base[si]
		for _, p := range s.Parts {
			for _, kind := range []string{"exp_avg", "exp_avg_sq"} {
				buf := a.m
				if kind == "exp_avg_sq" {
					buf = a.v
				}
				key := optim.Prefix + p.Param + "." + kind
				if err := idx.fill(key, buf[b+p.SegOffset:b+p.SegOffset+p.Len], p.ParamOffset, numelOf(p.Shape)); err != nil {
					if a.step == 0 {
						continue
					}
					return err
				}
			}
		}
	}
	return nil
}

// heapAlloc allocates on the Go heap.
type heapAlloc struct{}

func (heapAlloc) Alloc(_ string, n int) ([]float32, error) { return make([]float32, n), nil }

// fileAlloc maps one file per buffer under dir.
type fileAlloc struct {
	dir     string
	rank    int
	regions []*region
}

func (f *fileAlloc) Alloc(name string, n int) ([]float32, error) {
	path := fmt.Sprintf("%s/rank%d-%s.f32", f.dir, f.rank, name)
	r, err := newFile(fmt.Sprintf("rank %d %s", f.rank, name), path, n)
	if err != nil {
		return nil, err
	}
	f.regions = append(f.regions, r)
	return r.f, nil
}
