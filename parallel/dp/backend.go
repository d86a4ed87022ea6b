package dp

import (
	"context"
	"runtime"

	"github.com/gorgonia-parallel/gp/nn"
)

// Backend is where a DataParallel's replicas run, how the master's parameters reach them and
// how their gradients come back. The DataParallel does the rest, once for every backend: it
// splits the batch (Chunks), compiles a program per replica and chunk size, runs the active
// replicas concurrently, gathers outputs and losses, weights the chunks (n_i/N, or 1 with
// WithSumLoss) and reports a replica's failure. The host backend (the default) runs replicas
// as goroutines over the model's host memory; cuda/devdp's runs them on CUDA devices.
//
// The DataParallel calls a Backend from the goroutine that drives it, except Executor.Run,
// which runs on one goroutine per active replica. In a Run: Begin, the replicas' Runs, then
// Reduce (a training program whose replicas all succeeded) or Abort (one failed).
type Backend interface {
	// Devices returns the replicas' devices; the first is the master.
	Devices() []Device
	// Accept is called once, by New, with the model and the options that concern the
	// backend; it prepares the replicas and returns an error naming the option it cannot
	// honour.
	Accept(m *nn.Model, s Settings) error
	// Compile builds replica i's program with build; opts hold the caller's build options
	// and DataParallel's (its gradient hook; nn.WithPrivateBuffers for i > 0).
	Compile(i int, build nn.BuildFunc, opts ...nn.BuildOption) (Executor, error)
	// Begin readies the first n replicas for a run: the master's current parameters
	// become theirs. When training, the master's gradients so far are kept: Reduce adds to
	// them and Abort restores them.
	Begin(ctx context.Context, n int, training bool) error
	// Reduce adds Σ_i ws[i]·g_i, the gradients of the first len(ws) replicas (execs, in
	// replica order), to the master's gradients. On error the master's gradients are as
	// Begin found them.
	Reduce(ctx context.Context, execs []Executor, ws []float32) error
	// Abort puts the master's gradients back as Begin found them after a failed training
	// run.
	Abort() error
	// Step applies the optimizer given in the build options (nn.WithOptimizer, or
	// nn.WithSolver where the backend takes one) to the master's parameters once, and
	// zeroes the master's gradients.
	Step(ctx context.Context) error
	// ZeroGrad zeroes the master's gradients.
	ZeroGrad() error
	// Close releases what Accept prepared. The devices are the caller's.
	Close() error
}

// Executor is a backend's compiled program for one replica and chunk size.
type Executor interface {
	// Compiled is the nn program the replica's graph was built as (its inputs' shapes,
	// loss, mode).
	Compiled() *nn.Program
	// Run runs forward and, in train mode, backward with the replica's gradients starting
	// from zero; each gradient, once final, reaches the gradient hook Compile was given.
	Run(ctx context.Context) error
	// SetInput, LossValue, Output and Close are train.Program's.
	SetInput(name string, data []float32) error
	LossValue() (float32, error)
	Output(name string) ([]float32, error)
	Close() error
}

// Settings are the options of New that a Backend may not be able to honour.
type Settings struct {
	// BuildOptions are WithBuildOptions': the optimizer (nn.WithOptimizer) or solver
	// (nn.WithSolver) among them.
	BuildOptions []nn.BuildOption
	// ReduceWorkers is WithReduceWorkers' count, 0 when it was not given.
	ReduceWorkers int
}

// hostBackend runs replicas as goroutines of this process: every replica's graph binds the
// model's flat parameter buffer (nothing to copy before a run) and accumulates into its own
// host gradient buffer, which the master reads directly (reduceInto).
type hostBackend struct {
	devs    []Device
	model   *nn.Model
	workers int
	grads   [][]float32 // by replica
	master  *nn.Program // replica 0's program of the last training Run
}

func (h *hostBackend) Devices() []Device { return h.devs }

func (h *hostBackend) Accept(m *nn.Model, s Settings) error {
	h.model = m
	if h.workers = s.ReduceWorkers; h.workers <= 0 {
		h.workers = runtime.GOMAXPROCS(0)
	}
	h.grads = make([][]float32, len(h.devs))
	return nil
}

func (h *hostBackend) Compile(i int, build nn.BuildFunc, opts ...nn.BuildOption) (Executor, error) {
	if h.grads[i] == nil {
		h.grads[i] = make([]float32, len(h.model.Params.Grad))
	}
	p, err := nn.Compile(h.model, build, append(opts, nn.WithGradBuffer(h.grads[i]))...)
	if err != nil {
		return nil, err
	}
	return hostExec{Program: p, grad: h.grads[i]}, nil
}

func (h *hostBackend) Begin(context.Context, int, bool) error { return nil }

func (h *hostBackend) Reduce(_ context.Context, execs []Executor, ws []float32) error {
	reduceInto(h.model.Params.Grad, h.grads[:len(ws)], ws, h.workers)
	// The master's learnables (replica 0's leaves, bound to the model's values) report the
	// reduced gradient, for a gorgonia solver or a hand-written update.
	master := execs[0].Compiled()
	if err := master.AliasGrads(h.model.Params.Grad); err != nil {
		return err
	}
	h.master = master
	return nil
}

// Abort has nothing to put back: the replicas accumulate in their own buffers.
func (h *hostBackend) Abort() error { return nil }

// Step runs after a training Run (DataParallel.Step checks), so master is set.
func (h *hostBackend) Step(context.Context) error {
	if err := h.master.Update(); err != nil {
		return err
	}
	h.model.Params.ZeroGrad()
	return nil
}

func (h *hostBackend) ZeroGrad() error { h.model.Params.ZeroGrad(); return nil }

func (h *hostBackend) Close() error { return nil }

// hostExec is an nn program and its replica's gradient buffer as an Executor.
type hostExec struct {
	*nn.Program
	grad []float32
}

func (x hostExec) Compiled() *nn.Program { return x.Program }

func (x hostExec) Run(ctx context.Context) error {
	if x.Builder.Training() {
		clear(x.grad)
	}
	return x.Program.Run(ctx)
}
