package trainer

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
)

// strategy is what -strategy selects: the names are read once, here; the rest of the
// trainer asks the strategy, never the name.
type strategy struct {
	// sharded: each rank holds a shard of the gradients and optimizer state (ZeRO-3):
	// gradient norms are all-reduced, checkpoints are sharded, the model's gradient buffer
	// is not where the gradients are.
	sharded bool
	// newEngine builds the strategy's engine.
	newEngine func(ctx context.Context, cfg *settings, st strategy, g comm.Group, model *nn.Model, shape [3]int, log *slog.Logger) (engine, error)
	// solver: the strategy's program steps the whole model, so a gorgonia solver
	// (WithOptimizer(Solver(...))) can be its update.
	solver bool
	// compile builds the replicated engine's training program (nil for sharded ones).
	compile func(cfg *settings, d *ddp.DDP, m *nn.Model, local int, shape [3]int, scaler *amp.GradScaler, opts []nn.BuildOption) (train.Program, error)
}

var strategies = map[string]strategy{
	"ddp":   {newEngine: newReplicatedEngine, compile: compileDDP, solver: true},
	"none":  {newEngine: newReplicatedEngine, compile: compileDDP, solver: true},
	"dp":    {newEngine: newReplicatedEngine, compile: compileDP},
	"zero3": {sharded: true, newEngine: newShardedEngine},
}

// strategyOf looks -strategy up ("" is ddp).
func strategyOf(name string) (strategy, error) {
	if name == "" {
		name = "ddp"
	}
	s, ok := strategies[name]
	if !ok {
		names := make([]string, 0, len(strategies))
		for n := range strategies {
			names = append(names, n)
		}
		slices.Sort(names)
		return strategy{}, fmt.Errorf("trainer: unknown strategy %q (%s)", name, strings.Join(names, ", "))
	}
	return s, nil
}

// compileDDP is DDP over the group (also for world 1).
func compileDDP(cfg *settings, d *ddp.DDP, m *nn.Model, local int, shape [3]int, scaler *amp.GradScaler, opts []nn.BuildOption) (train.Program, error) {
	return d.Compile(cfg.buildFor(local, shape, scaler), opts...)
}

// compileDP is DataParallel over cfg.DPReplicas replicas in this one process.
func compileDP(cfg *settings, d *ddp.DDP, m *nn.Model, local int, shape [3]int, scaler *amp.GradScaler, opts []nn.BuildOption) (train.Program, error) {
	if d.Size() != 1 {
		return nil, fmt.Errorf("trainer: strategy dp runs in one process; launch it without gprun (world size is %d)", d.Size())
	}
	rep, err := dp.New(m, func(b *nn.Builder, n int) (*G.Node, error) {
		return cfg.buildFor(n, shape, scaler)(b)
	}, dp.WithReplicas(cfg.DPReplicas), dp.WithBuildOptions(opts...))
	if err != nil {
		return nil, err
	}
	return rep.Program(local)
}
