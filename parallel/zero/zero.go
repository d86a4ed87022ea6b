package zero

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/gorgonia-parallel/gp/internal/region"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/replica"
)

// ErrClosed is returned by an engine or program used after Engine.Close.
var ErrClosed = errors.New("zero: engine closed")

// Offload says where the shard and optimizer state live.
type Offload int

const (
	// OffloadNone keeps everything in host memory with the optimizer given.
	OffloadNone Offload = iota
	// OffloadCPU keeps the shard and optimizer state in host memory and steps with the
	// multi-goroutine fused AdamW. On a CPU-only machine this is where they are anyway.
	OffloadCPU
	// OffloadDisk keeps the optimizer state (and with DiskMaster the master shard) in files
	// under a directory, mapped with mmap: the step reads the state back (MADV_WILLNEED)
	// when the forward starts and drops it from the process (MADV_DONTNEED) after the
	// optimizer step, so the process's RSS drops by its size. Where files cannot be mapped
	// (windows) New fails with an error wrapping errors.ErrUnsupported.
	OffloadDisk
)

func (o Offload) String() string {
	switch o {
	case OffloadCPU:
		return "cpu"
	case OffloadDisk:
		return "disk"
	}
	return "none"
}

// Option configures New, on the host and on every backend alike.
type Option func(*Config)

// Config is the options resolved (NewConfig): what an engine reads. A backend that cannot
// honour a setting refuses it at construction, naming the option and the backend.
type Config struct {
	// Key cuts the parameters into gather units (WithUnitDepth, WithUnitKey).
	Key func(name string) string
	// Optimizer builds the shard's optimizer (WithOptimizer); nil is refused.
	Optimizer OptimizerFunc
	// WeightDecay is the segments' decay (WithWeightDecay).
	WeightDecay float64
	// Prefetch is how many units ahead are gathered (WithPrefetch).
	Prefetch int
	// Offload, Workers, Dir and DiskMaster are WithOffload's, WithOffloadDir's and
	// DiskMaster's.
	Offload    Offload
	Workers    int
	Dir        string
	DiskMaster bool
	// SyncBN is SyncBatchNorm's.
	SyncBN bool
	// CheckEvery is CheckEvery's.
	CheckEvery int
	// Backend is WithBackend's; nil is the host's.
	Backend Backend
}

// NewConfig applies opts over the defaults: units by DepthKey(1), prefetch 1, no offload,
// the agreement check every replica.DefaultCheckEvery runs.
func NewConfig(opts ...Option) Config {
	c := Config{Key: DepthKey(1), Prefetch: 1, CheckEvery: replica.DefaultCheckEvery}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// CheckEvery sets how often, in training runs, the ranks check that they agree on what
// ZeRO-3 keeps alike on every rank: the optimizer's step count and learning rate (a
// scheduler stepped on one rank only would update one shard with another rate) and, under
// SyncBatchNorm, the buffers. A difference fails the run on every rank with an error
// (ErrDiverged) naming what differs and the ranks. Default replica.DefaultCheckEvery; 0
// turns it off. (The parameters themselves are sharded: each exists once, so they cannot
// disagree.)
func CheckEvery(runs int) Option { return func(c *Config) { c.CheckEvery = runs } }

// ErrDiverged is wrapped by a Run's error when the periodic check (CheckEvery) finds that
// the ranks disagree.
var ErrDiverged = replica.ErrDiverged

// WithUnitDepth groups parameters into gather units by the first depth components of their
// names (default 1: top-level modules, "layer1", "fc").
func WithUnitDepth(depth int) Option { return func(c *Config) { c.Key = DepthKey(max(depth, 1)) } }

// WithUnitKey groups parameters into gather units by key(name); parameters adjacent in the
// flat buffer with equal keys form one unit.
func WithUnitKey(key func(name string) string) Option { return func(c *Config) { c.Key = key } }

// WithOptimizer chooses the optimizer of the shard (AdamW, Optim over any of optim's
// optimizers, or an OptimizerFunc of one's own). It is required: New refuses an engine
// without one, as PyTorch's and DeepSpeed's ZeRO make the optimizer explicit. Under
// OffloadCPU and OffloadDisk, AdamW's optim.WithWorkers spreads the update over cores.
func WithOptimizer(f OptimizerFunc) Option { return func(c *Config) { c.Optimizer = f } }

// WithWeightDecay is the decay handed to optim.Segments: every parameter gets wd except
// those marked NoWeightDecay (default 0).
func WithWeightDecay(wd float64) Option { return func(c *Config) { c.WeightDecay = wd } }

// WithPrefetch is how many units ahead of the running one are all-gathered (default 1;
// 0 gathers each unit only when the tape reaches it).
func WithPrefetch(n int) Option { return func(c *Config) { c.Prefetch = max(n, 0) } }

// WithOffload selects offload. OffloadDisk needs a directory (WithOffloadDir). workers is
// AdamW's goroutine count under OffloadCPU and OffloadDisk (<= 0: GOMAXPROCS) unless AdamW
// is given optim.WithWorkers.
func WithOffload(o Offload, workers int) Option {
	return func(c *Config) { c.Offload, c.Workers = o, workers }
}

// WithOffloadDir is the directory of OffloadDisk's files (one per buffer and rank).
func WithOffloadDir(dir string) Option { return func(c *Config) { c.Dir = dir } }

// DiskMaster puts the master shard in a file too under OffloadDisk.
func DiskMaster() Option { return func(c *Config) { c.DiskMaster = true } }

// SyncBatchNorm makes BatchNorm layers reduce their batch statistics over the group, so
// that BatchNorm sees the global batch (as DDP's SyncBatchNorm).
func SyncBatchNorm() Option { return func(c *Config) { c.SyncBN = true } }

// Engine is one rank's ZeRO-3 state: the layout, the shards, the optimizer and, on the
// host, the regions that hold gathered parameters and full-size gradients during a step.
// With a backend (WithBackend) the shards, the optimizer and the step's memory are the
// backend's, and the methods below say what they do there. It is driven from one goroutine.
type Engine struct {
	// Model is the wrapped model. On the host, after New its ParamSet's Data and Grad (and
	// every Param's) are placeholders: zeros with the right lengths, so that sizes and
	// names still work, that cost no memory until written. The parameters live in the
	// shards (read them with GatherParams or a checkpoint; write them with Load). Writing
	// through the ParamSet is harmless and has no effect on training: m.Params.ZeroGrad()
	// clears zeros, and values written are ignored (Engine.ZeroGrad gives their pages
	// back). With a backend the ParamSet keeps rank 0's parameters as New broadcast them,
	// which training neither reads nor writes.
	Model *nn.Model
	be    Backend // WithBackend's; nil on the host

	g           comm.Group
	cfg         Config
	rank, world int
	lay         *Layout
	master      []float32
	grad        []float32
	opt         optim.Optimizer
	segs        []optim.Segment
	alloc       optim.Allocator
	masterR     *region.Region // DiskMaster only
	leaves      *region.Region // read-only zeros: every program's parameter leaves (never read)
	placeholder *region.Region // writable zeros: the ParamSet's Data after New
	gradHolder  *region.Region // writable zeros: the ParamSet's Grad after New
	gatherR     *region.Region // gathered parameters, padded unit layout
	sendR       *region.Region // reduce-scatter sources, padded unit layout
	recvR       *region.Region // reduce-scatter results, shard layout
	closed      bool
	peak        int64
	steps       int
	checker     replica.Checker
	scalars     []int64
}

// New shards model over g; it is the one ZeRO-3 constructor. Every rank calls it with the
// same options. It checks that the ranks' models have the same size, broadcasts rank 0's
// parameters and buffers and cuts the units and shards (Layout). On the host (the default)
// it then keeps this rank's shard, builds the optimizer over it, and drops the model's full
// parameter and gradient buffers; WithBackend puts the shards, the optimizer and the
// programs elsewhere.
func New(ctx context.Context, model *nn.Model, g comm.Group, opts ...Option) (*Engine, error) {
	if model == nil || model.Params == nil || g == nil {
		return nil, errors.New("zero: nil model or process group")
	}
	cfg := NewConfig(opts...)
	e := &Engine{Model: model, be: cfg.Backend, g: g, cfg: cfg, rank: g.Rank(), world: g.Size()}
	if e.world < 1 || e.rank < 0 || e.rank >= e.world {
		return nil, fmt.Errorf("zero: rank %d outside world size %d", e.rank, e.world)
	}
	if cfg.Optimizer == nil {
		return nil, fmt.Errorf("zero: rank %d: no optimizer: give WithOptimizer, for example zero.WithOptimizer(zero.AdamW(1e-3)) (ZeRO-3 steps each rank's shard with the engine's optimizer; a gorgonia solver or an optimizer given to Compile cannot)", e.rank)
	}
	e.checker.Every = cfg.CheckEvery
	ps := model.Params
	if e.be != nil {
		if err := e.be.Accept(g, cfg); err != nil {
			return nil, fmt.Errorf("zero: rank %d: %w", e.rank, err)
		}
	} else if cfg.Offload == OffloadDisk && cfg.Dir == "" {
		return nil, fmt.Errorf("zero: rank %d: disk offload needs WithOffloadDir", e.rank)
	}
	if err := replica.CheckModels(ctx, g, ps); err != nil {
		return nil, fmt.Errorf("zero: %w", err)
	}
	if err := replica.Broadcast(ctx, g, ps, e.who()); err != nil {
		return nil, err
	}
	lay, err := NewLayout(ps, e.world, e.rank, cfg.Key)
	if err != nil {
		return nil, err
	}
	e.lay = lay
	if e.be != nil {
		if err := e.be.Open(ctx, model, g, lay, cfg); err != nil {
			return nil, fmt.Errorf("zero: rank %d: %w", e.rank, errors.Join(err, e.be.Close()))
		}
		return e, nil
	}
	if err := e.allocate(); err != nil {
		e.Close()
		return nil, err
	}
	for _, u := range lay.units {
		lo, hi := lay.Owned(u)
		copy(e.master[u.ShardBase:], ps.Data[lo:hi])
	}
	segs, _, err := lay.Segments(ps, cfg.WeightDecay, e.master, e.grad)
	if err != nil {
		e.Close()
		return nil, err
	}
	e.segs = segs
	if e.opt, err = cfg.Optimizer(segs, e.alloc); err != nil {
		e.Close()
		return nil, fmt.Errorf("zero: rank %d: optimizer: %w", e.rank, err)
	}
	e.releaseState()
	// Drop the model's full buffers: nothing may keep the arrays nn.NewModel allocated.
	ps.Data, ps.Grad = e.placeholder.Floats(), e.gradHolder.Floats()
	for _, p := range ps.Params {
		n := p.Numel()
		p.Data = ps.Data[p.Offset : p.Offset+n : p.Offset+n]
		p.Grad = ps.Grad[p.Offset : p.Offset+n : p.Offset+n]
	}
	return e, nil
}

func (e *Engine) allocate() error {
	l, cfg := e.lay, e.cfg
	var err error
	workers := 1
	if cfg.Offload != OffloadNone {
		workers = cfg.Workers
	}
	e.alloc = HeapAlloc{Workers: workers}
	if cfg.Offload == OffloadDisk {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return fmt.Errorf("zero: rank %d: offload directory: %w", e.rank, err)
		}
		e.alloc = &fileAlloc{dir: cfg.Dir, rank: e.rank, workers: workers}
	}
	if cfg.Offload == OffloadDisk && cfg.DiskMaster {
		if e.masterR, err = mapFile(fmt.Sprintf("rank %d master shard", e.rank), fmt.Sprintf("%s/rank%d-master.f32", cfg.Dir, e.rank), l.shardLen); err != nil {
			return err
		}
		e.master = e.masterR.Floats()
	} else {
		e.master = make([]float32, l.shardLen)
	}
	e.grad = make([]float32, l.shardLen)
	for _, r := range []struct {
		dst  **region.Region
		name string
		n    int
	}{{&e.gatherR, "gathered parameters", l.gatherLen}, {&e.sendR, "reduce-scatter input", l.gatherLen},
		{&e.recvR, "reduce-scatter output", l.shardLen}, {&e.placeholder, "parameter placeholder", l.psi},
		{&e.gradHolder, "gradient placeholder", l.psi}} {
		if *r.dst, err = region.NewAnon(fmt.Sprintf("rank %d %s", e.rank, r.name), r.n); err != nil {
			return regionErr(err)
		}
	}
	largest := 0
	for _, p := range e.Model.Params.Params {
		largest = max(largest, p.Numel())
	}
	if e.leaves, err = region.NewZeros(fmt.Sprintf("rank %d parameter leaves", e.rank), largest); err != nil {
		return regionErr(err)
	}
	return nil
}

// checkAgreement runs the periodic agreement check (CheckEvery), before a training run on
// every backend.
func (e *Engine) checkAgreement(ctx context.Context) error {
	if !e.checker.Due() {
		return nil
	}
	steps := int64(e.steps)
	if e.be != nil {
		steps = e.be.Steps()
	}
	e.scalars = append(e.scalars[:0], steps, int64(math.Float64bits(e.Optimizer().LR())))
	ts := []replica.Tensor{{Kind: "optimizer", Name: "step count and learning rate", I64: e.scalars}}
	ts = append(ts, replica.Replicated(e.Model.Params, false, e.cfg.SyncBN)...)
	return e.checker.Check(ctx, e.g, ts, int(steps), e.who())
}

func (e *Engine) who() string { return fmt.Sprintf("zero: rank %d", e.rank) }

// leafBacking is nn.WithParamBacking's function: every leaf is bound to the same read-only
// zeros, which nothing reads (the gather op ignores its input).
func (e *Engine) leafBacking(p *nn.Param) []float32 { n := p.Numel(); return e.leaves.Floats()[:n:n] }

// Rank is this rank.
func (e *Engine) Rank() int { return e.rank }

// World is the world size.
func (e *Engine) World() int { return e.world }

// Units lists the gather units in flat-buffer order.
func (e *Engine) Units() []*Unit { return e.lay.units }

// Optimizer is the shard's optimizer (for an amp.GradScaler's Step, or a scheduler).
func (e *Engine) Optimizer() optim.Optimizer {
	if e.be != nil {
		return e.be.Optimizer()
	}
	return e.opt
}

// ZeroGrad clears the gradient shard and, on the host, gives back the pages of anything
// written through the model's placeholder Data and Grad (they read as zeros again); its
// error is that of giving the pages back, or the backend's.
func (e *Engine) ZeroGrad() error {
	clear(e.grad)
	if e.closed {
		return nil
	}
	if e.be != nil {
		return e.be.ZeroGrad()
	}
	if err := errors.Join(e.placeholder.ReleaseAll(), e.gradHolder.ReleaseAll()); err != nil {
		return fmt.Errorf("zero: rank %d: zero grad: %w", e.rank, err)
	}
	return nil
}

// Step runs the optimizer on the shard, then drops disk-offloaded state from memory. It
// does not zero the gradients (Program.Step does).
func (e *Engine) Step(ctx context.Context) error {
	if e.closed {
		return ErrClosed
	}
	if e.be != nil {
		if err := e.be.Step(ctx); err != nil {
			return fmt.Errorf("zero: rank %d: optimizer step: %w", e.rank, err)
		}
		return nil
	}
	if err := e.opt.Step(); err != nil {
		return fmt.Errorf("zero: rank %d: optimizer step: %w", e.rank, err)
	}
	e.steps++
	return e.releaseState()
}

// releaseState drops file-backed state pages from the process (they stay in the file and
// the page cache).
func (e *Engine) releaseState() error {
	if fa, ok := e.alloc.(*fileAlloc); ok {
		for _, r := range fa.regions {
			if err := r.ReleaseAll(); err != nil {
				return regionErr(err)
			}
		}
	}
	return regionErr(e.masterR.ReleaseAll())
}

// prefetchState starts reading file-backed state back in, overlapping the step's compute.
func (e *Engine) prefetchState() {
	if fa, ok := e.alloc.(*fileAlloc); ok {
		for _, r := range fa.regions {
			r.WillNeed()
		}
	}
}

// GatherParams all-gathers the full parameters into a new buffer with nn.ParamSet's layout
// (parameter p is out[p.Offset:p.Offset+p.Numel()]). Every rank must call it.
func (e *Engine) GatherParams(ctx context.Context) ([]float32, error) {
	if e.closed {
		return nil, ErrClosed
	}
	if e.be != nil {
		return e.be.GatherParams(ctx)
	}
	out := make([]float32, e.lay.psi)
	for _, u := range e.lay.units {
		tmp := make([]float32, u.Padded)
		if err := e.g.AllGather(comm.F32(tmp), comm.F32(e.master[u.ShardBase:u.ShardBase+u.Shard])).Wait(ctx); err != nil {
			return nil, fmt.Errorf("zero: rank %d: gather of unit %s: %w", e.rank, u.Name, err)
		}
		copy(out[u.Lo:u.Hi], tmp)
	}
	return out, nil
}

// Close syncs and unmaps the engine's memory and closes its files, or closes its backend.
// Programs compiled from the engine fail with ErrClosed afterwards; on the host the model's
// parameters stay placeholders.
func (e *Engine) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	if e.be != nil {
		return e.be.Close()
	}
	var errs []error
	if fa, ok := e.alloc.(*fileAlloc); ok {
		for _, r := range fa.regions {
			errs = append(errs, regionErr(r.Sync()), regionErr(r.Close()))
		}
	}
	errs = append(errs, regionErr(e.masterR.Sync()))
	for _, r := range []*region.Region{e.masterR, e.gatherR, e.sendR, e.recvR} {
		errs = append(errs, regionErr(r.Close()))
	}
	// The leaves and the placeholders stay mapped (zeros cost no memory): compiled graphs
	// and the model keep slices of them. What was written through the placeholders goes.
	errs = append(errs, regionErr(e.placeholder.ReleaseAll()), regionErr(e.gradHolder.ReleaseAll()))
	return errors.Join(errs...)
}
