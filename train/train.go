// Package train names the verbs of a compiled training program, one meaning each for every
// strategy (one process, DDP, DataParallel, ZeRO-3) and every kind of model (nn modules or a
// plain gorgonia graph, see nn.NewGraphModel): the trainer and users program against
// Program, whatever wraps the graph.
//
// The verbs:
//
//   - Run: forward, backward and the reduction of the gradients over the replicas. On return
//     the gradients hold what earlier Runs left (since the last Step or ZeroGrad) plus this
//     batch's gradient averaged over the replicas (under ZeRO-3: this rank's shard of it).
//   - Step: the optimizer's (or gorgonia solver's) update from those gradients, then the
//     gradients are zeroed, as gorgonia's solvers zero them. So a gorgonia solver that the
//     user steps after Step (or after RunStep) finds zero gradients and does nothing, and
//     nothing can tell: give the solver to Compile (nn.WithSolver) and let Step run it, or
//     call Run alone before stepping one's own solver.
//   - ZeroGrad: zero the gradients without an update (after a skipped step, or to drop an
//     accumulation).
//
// The optimizer is given once, where the program is built, so Step takes no argument: for
// every replicated strategy (one process, DDP, DataParallel) on the host and on a device it
// is nn.WithOptimizer (or nn.WithSolver, on the host) in the build options (nn.Compile,
// tape.State.Compile, ddp.DDP.Compile, dp.WithBuildOptions), the device copying optim's SGD,
// Adam or AdamW; for ZeRO-3, whose optimizer exists with its shards, it is zero.WithOptimizer
// at zero.New.
//
// So a step is Run then Step; gradient accumulation is several Runs then one Step (with
// ddp's NoSync around all but the last Run to save the reductions). RunStep does Run and
// Step with the strategy's overlap where it has one (DDP updates each bucket as soon as its
// reduction completes), bit-identical to Run then Step.
package train

import "context"

// Program is one compiled training graph of one replica (rank or process). Its methods are
// called from one goroutine.
type Program interface {
	// Run runs forward and backward on the inputs and reduces the gradients (see the
	// package documentation). Every replica calls it the same number of times.
	Run(ctx context.Context) error
	// Step updates the parameters from the gradients with the program's optimizer and
	// zeroes the gradients.
	Step(ctx context.Context) error
	// ZeroGrad zeroes the gradients. Its error is a device's (a failed launch); on the host
	// it is nil.
	ZeroGrad() error
	// SetInput copies data into the named input (all of it: its size is fixed by the graph).
	SetInput(name string, data []float32) error
	// Output returns the named output of the last Run; it aliases the program's memory.
	Output(name string) ([]float32, error)
	// LossValue is this replica's loss in the last Run (under DataParallel: the global
	// batch's); GlobalLoss gives the global batch's under every strategy.
	LossValue() (float32, error)
	// Close releases the program.
	Close() error
}

// GlobalLosser is a Program whose replicas each see part of the global batch and that can
// give the global batch's loss (DDP, ZeRO-3). DataParallel's LossValue is already global.
type GlobalLosser interface {
	Program
	// GlobalLoss is the mean over the replicas of their losses in the last Run; it is a
	// collective: every replica calls it.
	GlobalLoss(ctx context.Context) (float32, error)
}

// GlobalLoss returns the global batch's loss of the last Run: the mean over the replicas of
// their losses for a GlobalLosser (one collective: every replica must call it), and
// LossValue otherwise (one process, DataParallel), with no collective.
func GlobalLoss(ctx context.Context, p Program) (float32, error) {
	if g, ok := p.(GlobalLosser); ok {
		return g.GlobalLoss(ctx)
	}
	return p.LossValue()
}

// Overlapped is a Program whose strategy can fuse Run and Step (see RunStep).
type Overlapped interface {
	Program
	// RunStep is Run followed by Step, with the update overlapping the reduction.
	RunStep(ctx context.Context) error
}

// RunStep runs p and steps it: with the strategy's overlap when p is Overlapped, else Run
// then Step. The result is the same either way.
func RunStep(ctx context.Context, p Program) error {
	if o, ok := p.(Overlapped); ok {
		return o.RunStep(ctx)
	}
	if err := p.Run(ctx); err != nil {
		return err
	}
	return p.Step(ctx)
}
