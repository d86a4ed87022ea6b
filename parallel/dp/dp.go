package dp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
)

// ChunkFunc builds one replica's graph for a chunk of n samples: it declares the inputs with
// first dimension n (b.Input("images", n, 3, 64, 64), b.Input("labels", n)), runs the model,
// names the outputs to gather, and returns the chunk's mean loss (nil in eval mode). It is
// called once per replica and chunk size, never concurrently.
type ChunkFunc func(b *nn.Builder, n int) (loss *G.Node, err error)

// Batch is one global batch. Every input is row-major with the samples along dim 0: an input
// of per-sample size k holds N·k values. Every input is scattered.
type Batch struct {
	// N is the global batch size.
	N int
	// Inputs maps the names the ChunkFunc declares to their values for the whole batch.
	Inputs map[string][]float32
}

// Result is what a step computed, on the master.
type Result struct {
	// Loss is the mean loss of the global batch: Σ_i (n_i/N)·Losses[i] (Σ_i Losses[i] with
	// WithSumLoss).
	Loss float32
	// Losses are the replicas' chunk losses, in replica order (only active replicas).
	Losses []float32
	// Chunks are the chunk sizes, in replica order: len(Chunks) replicas were active.
	Chunks []int
	// Outputs holds the gathered outputs (WithGather), each [N, ...] in batch order. The
	// slices are owned by the DataParallel and overwritten by the next step.
	Outputs map[string][]float32
	// Times is where the step's wall time went.
	Times Times
}

// Times splits a step's wall time. Bind (compiling new chunk sizes, checking shapes), Gather
// and Reduce run on the master alone; Run is the replicas' concurrent part.
type Times struct {
	Bind, Run, Gather, Reduce time.Duration
}

// ReplicaError is the error of a step that failed in a replica: compiling its program for
// its chunk size, binding its chunk, or running it. The other replicas were stopped (at
// their next gradient) or finished; nothing was reduced onto the master's gradients.
type ReplicaError struct {
	// Replica is the index of the replica that failed first.
	Replica int
	// Device is its device.
	Device Device
	// Lo and Hi delimit its chunk in the global batch.
	Lo, Hi int
	// Stopped lists the replicas that were stopped before they finished.
	Stopped []int
	// Err is the replica's error.
	Err error
}

// Error implements error.
func (e *ReplicaError) Error() string {
	s := fmt.Sprintf("dp: replica %d (%s, samples %d:%d): %v", e.Replica, e.Device, e.Lo, e.Hi, e.Err)
	if len(e.Stopped) > 0 {
		s += fmt.Sprintf(" (replicas %v stopped)", e.Stopped)
	}
	return s
}

// Unwrap returns the replica's error.
func (e *ReplicaError) Unwrap() error { return e.Err }

// DataParallel runs a model's replicas over a device list (see the package documentation).
// Its methods must not be called concurrently with each other.
type DataParallel struct {
	model    *nn.Model
	build    ChunkFunc
	cfg      config
	be       Backend
	replicas []*replica
	gathered map[string][]float32
	trained  bool // a training Run reduced onto the master since New
	mu       sync.Mutex
	closed   bool
}

// buildMu serialises graph construction: gorgonia's graphs share a global counter.
var buildMu sync.Mutex

// New returns a DataParallel over m whose replicas build their graphs with build, on the
// host's CPUs (WithDevices, WithReplicas) or on a backend's devices (WithBackend: cuda/devdp's
// for CUDA devices). An option the backend cannot honour is refused, naming it and the
// backend. Programs are compiled at the first step that needs their chunk size, or by
// Program. Close releases what the backend prepared.
func New(m *nn.Model, build ChunkFunc, opts ...Option) (*DataParallel, error) {
	if m == nil || build == nil {
		return nil, errors.New("dp: nil model or build function")
	}
	cfg := newConfig(opts)
	be := cfg.backend
	switch {
	case be == nil:
		if cfg.devices == nil {
			cfg.devices = CPUs(runtime.GOMAXPROCS(0))
		}
		if err := CheckDevices(cfg.devices, CPU); err != nil {
			return nil, fmt.Errorf("dp: host backend: %w (for CUDA devices pass WithBackend(devdp.NewBackend(devs...)) with devs from devdp.Open)", err)
		}
		be = &hostBackend{devs: cfg.devices}
	case cfg.devices != nil && !slices.Equal(cfg.devices, be.Devices()):
		return nil, fmt.Errorf("dp: WithDevices lists %v, the backend (%T) runs on %v: give the devices to the backend alone", cfg.devices, be, be.Devices())
	}
	devs := be.Devices()
	if len(devs) == 0 {
		return nil, fmt.Errorf("dp: the backend (%T) has no devices", be)
	}
	if err := be.Accept(m, Settings{BuildOptions: cfg.buildOpts, ReduceWorkers: cfg.workers}); err != nil {
		return nil, fmt.Errorf("dp: %w", err)
	}
	d := &DataParallel{model: m, build: build, cfg: cfg, be: be, gathered: map[string][]float32{}}
	for i, dev := range devs {
		d.replicas = append(d.replicas, &replica{index: i, dev: dev, progs: map[int]Executor{}})
	}
	return d, nil
}

// Model returns the model whose parameters the replicas share.
func (d *DataParallel) Model() *nn.Model { return d.model }

// Devices returns the replicas' devices; the first is the master.
func (d *DataParallel) Devices() []Device { return slices.Clone(d.be.Devices()) }

// Backend returns the backend the replicas run on (the host's unless WithBackend gave one).
func (d *DataParallel) Backend() Backend { return d.be }

// Chunks returns the chunk sizes torch.chunk gives for n samples over at most r replicas:
// ceil(n/r) per chunk, the last chunk smaller, as many chunks as needed (possibly fewer
// than r: Chunks(5, 4) is [2 2 1], Chunks(1, 2) is [1]).
func Chunks(n, r int) []int {
	if n <= 0 || r <= 0 {
		return nil
	}
	c := (n + r - 1) / r
	var out []int
	for lo := 0; lo < n; lo += c {
		out = append(out, min(c, n-lo))
	}
	return out
}

// Run scatters b over the replicas, runs them concurrently, gathers outputs and losses, and
// adds the gradient of the global batch's mean loss to the master's gradients (the model's
// gradient buffer on the host; the master device's on cuda/devdp's backend): the verb Run of
// package train, forward, backward and reduction; Step updates. A replica's failure is
// returned as a *ReplicaError, and the master's gradients are then as they were; ctx cancels
// the run (replicas stop at their next gradient).
func (d *DataParallel) Run(ctx context.Context, b Batch) (*Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("dp: run on a closed DataParallel")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dp: run: %w", err)
	}
	per, err := checkBatch(b)
	if err != nil {
		return nil, err
	}
	var times Times
	t0 := time.Now()
	sizes := Chunks(b.N, len(d.replicas))
	active := d.replicas[:len(sizes)]
	lo := 0
	for i, n := range sizes {
		r := active[i]
		r.lo, r.n = lo, n
		lo += n
		if err := d.bind(r, b, per); err != nil {
			return nil, r.fail(err, nil)
		}
	}
	master := active[0].prog.Compiled()
	training := master.Builder.Training() && master.Loss != nil
	if err := d.be.Begin(ctx, len(active), training); err != nil {
		return nil, fmt.Errorf("dp: readying %d replicas: %w", len(active), err)
	}
	// fail ends a Run that got past Begin without reducing: the master's gradients are put
	// back as Begin found them.
	fail := func(err error) (*Result, error) {
		if !training {
			return nil, err
		}
		if aerr := d.be.Abort(); aerr != nil {
			err = errors.Join(err, fmt.Errorf("dp: putting the master's gradients back: %w", aerr))
		}
		return nil, err
	}
	t1 := time.Now()
	times.Bind = t1.Sub(t0)
	if err := d.runAll(ctx, active, b, per); err != nil {
		return fail(err)
	}
	t2 := time.Now()
	times.Run = t2.Sub(t1)
	res := &Result{Chunks: sizes, Losses: make([]float32, len(active))}
	var loss float64
	for i, r := range active {
		res.Losses[i] = r.loss
		loss += d.weight(r.n, b.N) * float64(r.loss)
	}
	res.Loss = float32(loss)
	if res.Outputs, err = d.gather(active, b.N); err != nil {
		return fail(err)
	}
	t3 := time.Now()
	times.Gather = t3.Sub(t2)
	if training {
		execs := make([]Executor, len(active))
		ws := make([]float32, len(active))
		for i, r := range active {
			execs[i], ws[i] = r.prog, float32(d.weight(r.n, b.N))
		}
		if err := d.be.Reduce(ctx, execs, ws); err != nil {
			return nil, fmt.Errorf("dp: reducing %d replicas' gradients onto the master: %w", len(active), err)
		}
		d.trained = true
	}
	times.Reduce = time.Since(t3)
	res.Times = times
	return res, nil
}

// Step applies the optimizer or gorgonia solver given in WithBuildOptions (nn.WithOptimizer,
// nn.WithSolver on the host) once, on the master, to the reduced gradients, then zeroes them.
func (d *DataParallel) Step(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dp: step: %w", err)
	}
	if !d.trained {
		return errors.New("dp: Step before a training Run")
	}
	if err := d.be.Step(ctx); err != nil {
		return fmt.Errorf("dp: optimizer step: %w", err)
	}
	return nil
}

// ZeroGrad zeroes the master's gradients.
func (d *DataParallel) ZeroGrad() error {
	if err := d.be.ZeroGrad(); err != nil {
		return fmt.Errorf("dp: zeroing the master's gradients: %w", err)
	}
	return nil
}

// Learnables returns the master's learnables after a training Run on the host (nil before,
// and on another backend, whose gradients are not in host memory): replica 0's leaves, whose
// values are the model's parameters and whose Node.Grad() is the reduced gradient (see
// nn.Program.Learnables).
func (d *DataParallel) Learnables() G.Nodes {
	h, ok := d.be.(*hostBackend)
	if !ok || h.master == nil {
		return nil
	}
	return h.master.Learnables()
}

// weight is replica chunk n's share of the global loss of a batch of N.
func (d *DataParallel) weight(n, N int) float64 {
	if d.cfg.sumLoss {
		return 1
	}
	return float64(n) / float64(N)
}

// checkBatch validates a batch and returns each input's per-sample size.
func checkBatch(b Batch) (map[string]int, error) {
	if b.N <= 0 {
		return nil, fmt.Errorf("dp: batch of %d samples", b.N)
	}
	if len(b.Inputs) == 0 {
		return nil, errors.New("dp: batch without inputs")
	}
	per := make(map[string]int, len(b.Inputs))
	for name, v := range b.Inputs {
		if len(v) == 0 || len(v)%b.N != 0 {
			return nil, fmt.Errorf("dp: input %q holds %d values, not a positive multiple of the batch size %d", name, len(v), b.N)
		}
		per[name] = len(v) / b.N
	}
	return per, nil
}

// bind gets r's program for its chunk size (compiling it if needed) and checks that the
// program's inputs take the chunk.
func (d *DataParallel) bind(r *replica, b Batch, per map[string]int) error {
	x, err := d.program(r, r.n)
	if err != nil {
		return err
	}
	p := x.Compiled()
	for _, name := range slices.Sorted(maps.Keys(per)) {
		k := per[name]
		shape := p.InputShape(name)
		if shape == nil {
			return fmt.Errorf("the graph declares no input %q", name)
		}
		if len(shape) == 0 || shape[0] != r.n || perSample(shape) != k {
			return fmt.Errorf("input %q has shape %v, want a chunk of %d samples of %d values each", name, shape, r.n, k)
		}
	}
	if p.Loss == nil && len(d.cfg.gather) == 0 {
		return errors.New("the graph has no loss and no output is gathered (WithGather): nothing to compute")
	}
	r.prog = x
	return nil
}

// perSample is the number of values in one sample of an input of the given shape (batch
// first, len(shape) > 0): the product of its other dimensions.
func perSample(shape []int) int {
	n := 1
	for _, s := range shape[1:] {
		n *= s
	}
	return n
}

// program returns r's cached program for chunk size n, compiling it on first use.
func (d *DataParallel) program(r *replica, n int) (Executor, error) {
	if p, ok := r.progs[n]; ok {
		return p, nil
	}
	opts := append(slices.Clone(d.cfg.buildOpts), nn.WithGradHook(r.checkStop))
	if r.index > 0 {
		opts = append(opts, nn.WithPrivateBuffers())
	}
	buildMu.Lock()
	p, err := d.be.Compile(r.index, func(b *nn.Builder) (*G.Node, error) { return d.build(b, n) }, opts...)
	buildMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("compiling for a chunk of %d: %w", n, err)
	}
	r.progs[n] = p
	return p, nil
}

// runAll runs the active replicas concurrently and returns the first failure.
func (d *DataParallel) runAll(ctx context.Context, active []*replica, b Batch, per map[string]int) error {
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first = -1
		errs  = make([]error, len(active))
	)
	for i, r := range active {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.run(stepCtx, b, per)
			if err == nil {
				return
			}
			errs[i] = err
			mu.Lock()
			if first < 0 {
				first = i
				cancel()
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first < 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dp: step: %w", err)
	}
	var stopped []int
	for i, err := range errs {
		if i != first && err != nil {
			stopped = append(stopped, i)
		}
	}
	return active[first].fail(errs[first], stopped)
}

// gather copies the named outputs of the active replicas into the master's buffers.
func (d *DataParallel) gather(active []*replica, N int) (map[string][]float32, error) {
	if len(d.cfg.gather) == 0 {
		return nil, nil
	}
	out := make(map[string][]float32, len(d.cfg.gather))
	for _, name := range d.cfg.gather {
		var k int
		for i, r := range active {
			v, err := r.prog.Output(name)
			if err != nil {
				return nil, r.fail(fmt.Errorf("gathering output %q: %w", name, err), nil)
			}
			if i == 0 {
				if len(v)%r.n != 0 {
					return nil, r.fail(fmt.Errorf("output %q holds %d values for %d samples", name, len(v), r.n), nil)
				}
				k = len(v) / r.n
				if len(d.gathered[name]) != N*k {
					d.gathered[name] = make([]float32, N*k)
				}
			}
			if len(v) != r.n*k {
				return nil, r.fail(fmt.Errorf("output %q holds %d values for %d samples, want %d per sample as replica 0", name, len(v), r.n, k), nil)
			}
			copy(d.gathered[name][r.lo*k:], v)
		}
		out[name] = d.gathered[name]
	}
	return out, nil
}

// Close releases every replica's programs and what the backend prepared.
func (d *DataParallel) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for _, r := range d.replicas {
		for n, p := range r.progs {
			if err := p.Close(); err != nil {
				errs = append(errs, fmt.Errorf("dp: replica %d: closing program for chunk %d: %w", r.index, n, err))
			}
		}
		r.progs = nil
	}
	if err := d.be.Close(); err != nil {
		errs = append(errs, fmt.Errorf("dp: closing the backend: %w", err))
	}
	return errors.Join(errs...)
}
