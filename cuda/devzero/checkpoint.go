package devzero

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// Checkpoints are parallel/zero's (zero.Shard): the device engine copies its parameter shard
// into the host master copy and its moments into the host optimizer's state buffers (the
// segments' concatenation, padding left out), then writes them as the host engine does;
// Load reads them there and copies them to the device. Under OffloadCPU the host copies are
// the state itself. The device's arithmetic is the host optimizer's (its step count and
// learning rate are in the checkpoint), so a resumed run continues bit for bit.

// Save writes this rank's shard, the optimizer state and (rank 0) the model's buffers to
// dir/tag in parallel/zero's format, as zero.Engine.Save: rank 0 writes the manifest and
// points dir/LATEST at tag once every rank's shard is in place. Every rank calls it; it
// waits for the device.
func (e *Backend) Save(ctx context.Context, dir, tag string) error {
	if e.closed {
		return zero.ErrClosed
	}
	if err := e.opt.stageOut(ctx); err != nil {
		return fmt.Errorf("devzero: rank %d: checkpoint %s: %w", e.rank, tag, err)
	}
	return e.shard().Save(ctx, dir, tag)
}

// Load restores this rank's shard, the optimizer state and the model's buffers from a
// checkpoint of either engine written at any world size (a directory as zero.ReadManifest
// resolves it), or from a consolidated .npz file, as zero.Engine.Load. It reads every shard
// file (no communication) and waits for the device.
func (e *Backend) Load(path string) error {
	if e.closed {
		return zero.ErrClosed
	}
	if err := e.dev.Synchronize(context.Background()); err != nil {
		return fmt.Errorf("devzero: rank %d: load %s: %w", e.rank, path, err)
	}
	if err := e.shard().Load(path); err != nil {
		return err
	}
	if err := e.opt.stageIn(); err != nil {
		return fmt.Errorf("devzero: rank %d: load %s: %w", e.rank, path, err)
	}
	return nil
}

// LoadEntries is Load from entries already read.
func (e *Backend) LoadEntries(entries []nn.StateEntry) error {
	if e.closed {
		return zero.ErrClosed
	}
	if err := e.dev.Synchronize(context.Background()); err != nil {
		return fmt.Errorf("devzero: rank %d: load: %w", e.rank, err)
	}
	if err := e.shard().LoadEntries(entries); err != nil {
		return err
	}
	if err := e.opt.stageIn(); err != nil {
		return fmt.Errorf("devzero: rank %d: load: %w", e.rank, err)
	}
	return nil
}

func (e *Backend) shard() zero.Shard {
	return zero.Shard{Group: e.coll, Params: e.model.Params, Segments: e.opt.segs, Optimizer: e.opt.host}
}

// stageOut copies the device's parameter shard and moments into the host copies a
// checkpoint writes (nothing under offload: they are the state).
func (o *shardOptimizer) stageOut(ctx context.Context) error {
	if o.offload {
		return o.e.dev.Synchronize(ctx)
	}
	if err := o.e.shardP.CopyTo(ctx, o.master); err != nil {
		return fmt.Errorf("parameter shard to the host: %w", err)
	}
	for i, kind := range o.kinds {
		sh, err := o.moments[i].ToHost(ctx)
		if err != nil {
			return fmt.Errorf("optimizer state %s to the host: %w", kind, err)
		}
		buf, off := o.state[kind], 0
		for si, sg := range o.segs {
			off += copy(buf[off:off+len(sg.Data)], sh[o.starts[si]:])
		}
	}
	return nil
}

// stageIn copies the host copies a checkpoint was read into to the device.
func (o *shardOptimizer) stageIn() error {
	e := o.e
	if o.offload {
		if err := o.pinM.CopyTo(e.shardP); err != nil {
			return fmt.Errorf("master shard to the device: %w", err)
		}
		return nil
	}
	if err := e.shardP.CopyFrom(o.master); err != nil {
		return fmt.Errorf("parameter shard to the device: %w", err)
	}
	sh := make([]float32, e.shardLen)
	for i, kind := range o.kinds {
		buf, off := o.state[kind], 0
		for si, sg := range o.segs {
			off += copy(sh[o.starts[si]:o.starts[si]+len(sg.Data)], buf[off:])
		}
		if err := o.moments[i].CopyFrom(sh); err != nil {
			return fmt.Errorf("optimizer state %s to the device: %w", kind, err)
		}
	}
	return nil
}
