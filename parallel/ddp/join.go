package ddp

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// joinState tracks the ranks still training inside Join.
type joinState struct {
	flags      []int64 // per rank: 0 joined, 1 active, 3 active and synchronising this step
	lastActive []int64 // the last non-empty flags: who trained in the last step anyone trained
}

// Join runs loop, this rank's training loop over its own data, for inputs that are uneven
// across ranks (PyTorch's join context manager). Ranks whose loop has returned shadow the
// collectives of the ranks still training: each step they contribute zero gradients (the
// average still divides by the world size, PyTorch's divide_by_initial_world_size) and
// receive the buffers, until every rank has joined. Then every rank takes the parameters and
// buffers of the rank that trained last, so all replicas end equal. Inside Join each step
// starts with one small all-gather that tells every rank who is still training.
//
// Join cannot shadow SyncBatchNorm (its reductions sit inside forward and backward); like
// PyTorch, it refuses.
func (d *DDP) Join(ctx context.Context, loop func(ctx context.Context) error) error {
	if d.cfg.syncBN {
		return fmt.Errorf("ddp: rank %d: Join does not support SyncBatchNorm", d.rank)
	}
	if d.join != nil {
		return fmt.Errorf("ddp: rank %d: Join is already running", d.rank)
	}
	d.join = &joinState{flags: make([]int64, d.size)}
	defer func() { d.join = nil }()
	if err := loop(ctx); err != nil {
		return err
	}
	for {
		if err := d.join.gather(ctx, d, 0); err != nil {
			return err
		}
		active, sync, root := d.join.summary()
		if active == 0 {
			break
		}
		if d.cfg.broadcastBuffers {
			if err := d.broadcastBuffers(ctx, root); err != nil {
				return err
			}
		}
		if sync {
			if err := d.shadowStep(ctx); err != nil {
				return err
			}
		}
	}
	last := 0
	for r, f := range d.join.lastActive {
		if f != 0 {
			last = r
		}
	}
	if err := d.be.WriteParams(ctx, func(data []float32) error {
		return d.g.Broadcast(comm.F32(data), last).Wait(ctx)
	}); err != nil {
		return fmt.Errorf("%s: join: broadcast of the last joiner's (rank %d) parameters: %w", d.who(), last, err)
	}
	return d.broadcastBuffers(ctx, last)
}

// shadowStep matches one synchronised step of the training ranks with zero gradients.
func (d *DDP) shadowStep(ctx context.Context) error {
	if err := d.be.ZeroGrad(); err != nil {
		return fmt.Errorf("%s: join: %w", d.who(), err)
	}
	d.beginStep(ctx, true)
	var errs []error
	for _, p := range d.flat {
		if err := d.markReady(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := d.finish(ctx, errors.Join(errs...), nil); err != nil {
		return fmt.Errorf("ddp: rank %d: join: shadowing a step: %w", d.rank, err)
	}
	return nil
}

// handshake is a training rank's side of the per-step exchange; it returns the rank whose
// buffers are broadcast (the highest rank still training).
func (j *joinState) handshake(ctx context.Context, d *DDP, sync bool) (int, error) {
	f := int64(1)
	if sync {
		f = 3
	}
	if err := j.gather(ctx, d, f); err != nil {
		return 0, err
	}
	_, _, root := j.summary()
	return root, nil
}

func (j *joinState) gather(ctx context.Context, d *DDP, flag int64) error {
	if err := d.g.AllGather(comm.I64(j.flags), comm.I64{flag}).Wait(ctx); err != nil {
		return fmt.Errorf("ddp: rank %d: join: exchanging who still trains: %w", d.rank, err)
	}
	for _, f := range j.flags {
		if f != 0 {
			j.lastActive = append(j.lastActive[:0], j.flags...)
			break
		}
	}
	return nil
}

// summary returns how many ranks train this step, whether any synchronises, and the
// highest training rank.
func (j *joinState) summary() (active int, sync bool, root int) {
	for r, f := range j.flags {
		if f != 0 {
			active++
			root = r
		}
		sync = sync || f == 3
	}
	return active, sync, root
}
