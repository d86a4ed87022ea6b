package zero

import (
	"context"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Backend is where an engine keeps its shards and runs its programs (WithBackend). New does
// what every backend shares, once; the Engine then answers Rank, World and Units and hands
// the rest to its backend. Every backend writes and reads the host's checkpoints (Shard).
//
// An engine calls its Backend from the goroutine that drives it, in this order: Accept,
// then Open, then the rest, then Close once.
type Backend interface {
	// Accept is called once, by New, before any communication, with the group and the
	// options resolved; it returns an error naming the option (or the group) it cannot
	// honour and the backend.
	Accept(g comm.Group, cfg Config) error
	// Open is called once, by New, after the broadcast: m holds rank 0's parameters and
	// lay is this rank's layout. It keeps the rank's shard and builds the optimizer
	// (cfg.Optimizer) over it.
	Open(ctx context.Context, m *nn.Model, g comm.Group, lay *Layout, cfg Config) error
	// Compile builds the model with build for ZeRO-3 (opts are the caller's: autocast,
	// nn.Training(false), more hooks).
	Compile(build nn.BuildFunc, opts ...nn.BuildOption) (Executor, error)
	// Optimizer is the shard's optimizer, the one cfg.Optimizer built.
	Optimizer() optim.Optimizer
	// Step applies the optimizer to the shard once; ZeroGrad zeroes the gradient shard.
	Step(ctx context.Context) error
	ZeroGrad() error
	// UnscaleGrads, ScaleGrads and GradSumSquares are Engine's, on the backend's gradient
	// shard (the engine checks the scale and clips, over them, once for every backend).
	UnscaleGrads(ctx context.Context, scale float32) (foundInf bool, err error)
	ScaleGrads(ctx context.Context, f float32) error
	GradSumSquares(ctx context.Context) (float64, error)
	// ShardGrad and ShardParams are Engine's: copies in host memory of the shards.
	ShardGrad(ctx context.Context) ([]float32, error)
	ShardParams(ctx context.Context) ([]float32, error)
	// Steps is the number of optimizer steps the shard has taken (CheckEvery compares it
	// over the ranks).
	Steps() int64
	// GatherParams is Engine's.
	GatherParams(ctx context.Context) ([]float32, error)
	// Checkpoint is the rank's part of a checkpoint over host copies of the backend's
	// state, which Engine.Save writes and Engine.Load reads (Shard). Before a Save (save
	// true) it brings the copies up to date; before a Load it waits until nothing writes
	// them, and Loaded then makes the backend's state what the Load left there.
	Checkpoint(ctx context.Context, save bool) (Shard, error)
	Loaded() error
	// CountMemory adds the bytes of the backend's master shard, gradient shard and
	// optimizer state, and the step's peak, to m (whose layout fields New has filled).
	CountMemory(m *Memory)
	// Close releases what Open made. The group and any device are the caller's.
	Close() error
}

// Executor is a backend's compiled program: what a Program runs when its engine has a
// backend (WithBackend).
type Executor interface {
	// Run runs one step on this rank, as Program.Run.
	Run(ctx context.Context) error
	// RunStep is Run then the engine's Step and ZeroGrad, with the update overlapping the
	// reduction where the backend can.
	RunStep(ctx context.Context) error
	// Units are the indexes in Engine.Units of the units the program gathers, in forward
	// order.
	Units() []int
	// Training is whether Run reduces gradients (the program has a loss and was built
	// without nn.Training(false)): the engine runs CheckEvery's check before such a Run.
	Training() bool
	// SetInput, Input, Output, LossValue and Close are train.Program's.
	SetInput(name string, data []float32) error
	Input(name string) ([]float32, error)
	Output(name string) ([]float32, error)
	LossValue() (float32, error)
	Close() error
}

// WithBackend makes b the engine's backend: its shards live and its programs run where b
// says (cuda/devzero.NewBackend(dev): on a CUDA device, over an NCCL group on that device
// given to New as its group, nccl.Group). Without it they are this package's, in host
// memory. An engine owns its backend: Engine.Close closes it. b refuses, at New and naming
// them, the options it cannot honour.
func WithBackend(b Backend) Option { return func(c *Config) { c.Backend = b } }
