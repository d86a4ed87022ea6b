package devzero

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// Checkpoint is zero.Backend's: the shard over the host copies (the master shard and the
// host optimizer's state buffers, or under OffloadCPU the state itself), brought up to date
// from the device for a Save (save true); for a Load, once the device is done with them.
// The engine writes and reads them as the host engine does, step count and learning rate
// included, so a resumed run continues bit for bit.
func (e *Backend) Checkpoint(ctx context.Context, save bool) (zero.Shard, error) {
	s := zero.Shard{Group: e.coll, Params: e.model.Params, Segments: e.opt.segs, Optimizer: e.opt.host}
	if save {
		return s, e.opt.stageOut(ctx)
	}
	return s, e.dev.Synchronize(ctx)
}

// Loaded is zero.Backend's: it copies what a Load wrote into the host copies to the device.
func (e *Backend) Loaded() error { return e.opt.stageIn() }

// stageOut copies the device's parameter shard and moments into the host copies a
// checkpoint writes (nothing under offload: they are the state).
func (o *shardOptimizer) stageOut(ctx context.Context) error {
	if o.offload {
		return o.e.dev.Synchronize(ctx)
	}
	if err := o.e.shardP.CopyTo(ctx, o.master); err != nil {
		return fmt.Errorf("parameter shard to the host: %w", err)
	}
	for i, kind := range o.flat.Kinds() {
		sh, err := o.flat.State()[i].ToHost(ctx)
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
	for i, kind := range o.flat.Kinds() {
		buf, off := o.state[kind], 0
		for si, sg := range o.segs {
			off += copy(sh[o.starts[si]:o.starts[si]+len(sg.Data)], buf[off:])
		}
		if err := o.flat.State()[i].CopyFrom(sh); err != nil {
			return fmt.Errorf("optimizer state %s to the device: %w", kind, err)
		}
	}
	return nil
}
