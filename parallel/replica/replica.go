// Package replica keeps the replicas of one model, one per rank of a process group, in
// agreement: it checks at start that they describe the same model (CheckModels), copies
// rank 0's state to every rank (Broadcast), reduces SyncBatchNorm's statistics
// (StatsReducer), and checks during training that their values have not drifted apart
// (Checker). DDP and ZeRO-3 share these mechanisms; none of them knows the strategy.
package replica

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Broadcaster copies root's buffers (BatchNorm running statistics, float32 and int64 alike)
// to every rank with at most two broadcasts, reusing its staging memory from call to call.
// It is used from one goroutine.
type Broadcaster struct {
	f32 []float32
	i64 []int64
}

// Buffers broadcasts root's values of bufs to every rank of g; who prefixes errors ("ddp:
// rank 1"). It is a collective.
func (b *Broadcaster) Buffers(ctx context.Context, g comm.Group, bufs []*nn.Buffer, root int, who string) error {
	if len(bufs) == 0 {
		return nil
	}
	b.f32, b.i64 = b.f32[:0], b.i64[:0]
	for _, x := range bufs {
		b.f32 = append(b.f32, x.Data...)
		b.i64 = append(b.i64, x.Int64...)
	}
	if len(b.f32) > 0 {
		if err := g.Broadcast(comm.F32(b.f32), root).Wait(ctx); err != nil {
			return fmt.Errorf("%s: broadcast of rank %d's float32 buffers: %w", who, root, err)
		}
	}
	if len(b.i64) > 0 {
		if err := g.Broadcast(comm.I64(b.i64), root).Wait(ctx); err != nil {
			return fmt.Errorf("%s: broadcast of rank %d's int64 buffers: %w", who, root, err)
		}
	}
	f, i := 0, 0
	for _, x := range bufs {
		f += copy(x.Data, b.f32[f:])
		i += copy(x.Int64, b.i64[i:])
	}
	return nil
}

// Broadcast copies rank 0's parameters and buffers to every rank of g. It is a collective.
func Broadcast(ctx context.Context, g comm.Group, ps *nn.ParamSet, who string) error {
	if err := g.Broadcast(comm.F32(ps.Data), 0).Wait(ctx); err != nil {
		return fmt.Errorf("%s: broadcast of rank 0's parameters: %w", who, err)
	}
	var b Broadcaster
	return b.Buffers(ctx, g, ps.Buffers, 0, who)
}

// StatsReducer is SyncBatchNorm's reducer (nn/ops.StatsReducer) over a process group: a
// blocking all-reduce Sum of each layer's statistics.
type StatsReducer struct {
	// Group is the process group.
	Group comm.Group
	// Ctx returns the context of the step in progress (nil: context.Background()).
	Ctx func() context.Context
	// Who prefixes errors ("ddp: rank 1").
	Who string
}

// ReduceStats sums buf over the group in place.
func (r StatsReducer) ReduceStats(buf []float64) error {
	ctx := context.Background()
	if r.Ctx != nil {
		if c := r.Ctx(); c != nil {
			ctx = c
		}
	}
	if err := r.Group.AllReduce(comm.F64(buf), comm.Sum).Wait(ctx); err != nil {
		return fmt.Errorf("%s: SyncBatchNorm all-reduce of %d statistics: %w", r.Who, len(buf), err)
	}
	return nil
}

// Mean returns the mean of every rank's v over g (v itself in a group of one): the global
// batch's loss from each rank's, when the ranks' batches are of equal size. who prefixes the
// error ("ddp: rank 1"). It is a collective.
func Mean(ctx context.Context, g comm.Group, v float32, who string) (float32, error) {
	if g == nil || g.Size() == 1 {
		return v, nil
	}
	buf := []float32{v}
	if err := g.AllReduce(comm.F32(buf), comm.Sum).Wait(ctx); err != nil {
		return 0, fmt.Errorf("%s: mean over the ranks: %w", who, err)
	}
	return buf[0] / float32(g.Size()), nil
}
