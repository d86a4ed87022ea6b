package devzero

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
)

// unitHooks is the backend as cuda/tape's unit hooks: gathers ahead of use, frees after.
type unitHooks struct{ e *Backend }

// gatherWork is an issued all-gather of a Run, waited for at its end.
type gatherWork struct {
	unit int
	w    nccl.DeviceWork
}

// Need makes the compute stream wait for unit u's gather (issuing it, and the next
// prefetch units' of the schedule, if not yet issued) and returns its block.
func (h unitHooks) Need(u int, ph tape.Phase) (*cuda.Tensor, error) {
	e := h.e
	k := e.needPos
	e.needPos++
	if k >= len(e.needs) || e.needs[k].Unit != u || e.needs[k].Phase != ph {
		return nil, fmt.Errorf("devzero: rank %d: unit %d (%s) needed out of the program's schedule (need %d of %d)", e.rank, u, ph, k, len(e.needs))
	}
	for j := max(k, e.issue); j <= k+e.prefetch && j < len(e.needs); j++ {
		if err := e.issueNeed(j); err != nil {
			return nil, err
		}
		e.issue = j + 1
	}
	e.emit("need", u, ph)
	if w := e.pend[u]; w != nil {
		e.pend[u] = nil
		if err := nccl.StreamWait(e.ctx, e.dev.Context(), e.dev.Stream(), w, e.gathered[u], "all-gather"); err != nil {
			return nil, fmt.Errorf("devzero: rank %d: unit %s: %w", e.rank, e.units[u].Name, err)
		}
	}
	return e.blocks[u], nil
}

// Done frees unit u's block, unless the unit's next Need is already within the prefetch
// window (its block stays and serves it).
func (h unitHooks) Done(u int, ph tape.Phase) error {
	e := h.e
	e.emit("done", u, ph)
	if e.keep[u] {
		e.keep[u] = false
		return nil
	}
	e.freeParams(u)
	return nil
}

// Grad returns unit u's gradient block of this Run, allocated and zeroed at its first use.
func (h unitHooks) Grad(u int) (*cuda.Tensor, error) {
	e := h.e
	if g := e.gradBlk[u]; g != nil {
		return g, nil
	}
	un := e.units[u]
	g, err := e.dev.Alloc(cuda.Float32, un.Padded)
	if err == nil {
		err = e.dev.Zero(g)
	}
	if err != nil {
		g.Free()
		return nil, fmt.Errorf("devzero: rank %d: unit %s's gradient block (%d floats): %w", e.rank, un.Name, un.Padded, err)
	}
	e.gradBlk[u] = g
	e.account(1, 4*un.Padded)
	return g, nil
}

// issueNeed issues the gather of the schedule's j-th Need, unless its unit is gathered now
// (then the unit is kept until that Need).
func (e *Backend) issueNeed(j int) error {
	n := e.needs[j]
	if e.blocks[n.Unit] != nil {
		e.keep[n.Unit] = true
		return nil
	}
	blk, w, err := e.gather(n.Unit)
	if err != nil {
		return fmt.Errorf("devzero: rank %d: %w", e.rank, err)
	}
	e.blocks[n.Unit], e.pend[n.Unit] = blk, w
	e.gworks = append(e.gworks, gatherWork{n.Unit, w})
	e.account(0, 4*e.units[n.Unit].Padded)
	e.emit("gather", n.Unit, n.Phase)
	return nil
}

// gather allocates a block for unit i and issues its all-gather into it on the group's
// stream, after the compute stream's work so far (which includes the kernels of every
// block freed before: the cache may hand one of them out here).
func (e *Backend) gather(i int) (*cuda.Tensor, nccl.DeviceWork, error) {
	u := e.units[i]
	blk, err := e.dev.Alloc(cuda.Float32, u.Padded)
	if err != nil {
		return nil, nil, fmt.Errorf("unit %s's gathered parameters (%d floats): %w", u.Name, u.Padded, err)
	}
	if err := e.dev.Context().EventRecord(e.gwait[i], e.dev.Stream()); err != nil {
		blk.Free()
		return nil, nil, fmt.Errorf("unit %s: recording the gather's event: %w", u.Name, err)
	}
	w := e.coll.AllGatherDeviceAfter(blk.Ptr(), at(e.shardP, u.ShardBase), u.Shard, libnccl.Float32, e.gwait[i], e.gathered[i])
	return blk, w, nil
}

// waitGathers waits for the Run's all-gathers to end and reports their errors.
func (e *Backend) waitGathers(ctx context.Context) error {
	var errs []error
	for _, g := range e.gworks {
		if err := g.w.Wait(ctx); err != nil {
			errs = append(errs, fmt.Errorf("all-gather of unit %s: %w", e.units[g.unit].Name, err))
		}
	}
	e.gworks = e.gworks[:0]
	return errors.Join(errs...)
}

// beginRun resets the per-Run gather state for a program's schedule.
func (e *Backend) beginRun(ctx context.Context, needs []tape.UnitEvent) {
	e.ctx, e.needs, e.needPos, e.issue = ctx, needs, 0, 0
	clear(e.keep)
	clear(e.pend)
	e.gworks = e.gworks[:0]
}

// freeParams frees unit u's gathered block.
func (e *Backend) freeParams(u int) {
	if b := e.blocks[u]; b != nil {
		b.Free()
		e.blocks[u] = nil
		e.account(0, -4*e.units[u].Padded)
	}
}

// freeGrad frees unit u's gradient block and reduce-scatter result.
func (e *Backend) freeGrad(u int) {
	if g := e.gradBlk[u]; g != nil {
		g.Free()
		e.gradBlk[u] = nil
		e.account(1, -4*e.units[u].Padded)
	}
	e.rsDst[u].Free()
	e.rsDst[u] = nil
}

// freeBlocks frees what a Run left (one that failed); its collectives have ended.
func (e *Backend) freeBlocks() {
	for u := range e.blocks {
		e.freeParams(u)
		e.freeGrad(u)
	}
}

// account adds n bytes to kind's (0: parameters, 1: gradients) live count and peak.
func (e *Backend) account(kind, n int) {
	e.live[kind] += n
	e.peak[kind] = max(e.peak[kind], e.live[kind])
}

func (e *Backend) emit(kind string, u int, ph tape.Phase) {
	if e.trace != nil {
		e.trace(TraceEvent{Kind: kind, Unit: u, Phase: ph})
	}
}
