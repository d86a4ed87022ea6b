package ddp

import "fmt"

// DeviceConfig is what an implementation of DDP on accelerator memory (cuda/devddp) reads of
// the options New was given, so that one set of ddp Options configures both paths: the
// device path reduces the buckets of Buckets (the initial layout, in launch order) over
// device memory with its own collectives, and keeps the contract of this package's Program.
type DeviceConfig struct {
	// FindUnused, StaticGraph, BroadcastBuffers, SyncBN and CheckEvery are the options of
	// the same names.
	FindUnused, StaticGraph, BroadcastBuffers, SyncBN bool
	CheckEvery                                        int
	// CommHook is set when WithCommHook replaced the default all-reduce.
	CommHook bool
}

// DeviceConfig returns the options New was given, for a device implementation.
func (d *DDP) DeviceConfig() DeviceConfig {
	_, plain := d.cfg.hook.(allReduceHook)
	return DeviceConfig{FindUnused: d.cfg.findUnused, StaticGraph: d.cfg.staticGraph, BroadcastBuffers: d.cfg.broadcastBuffers,
		SyncBN: d.cfg.syncBN, CheckEvery: d.cfg.checkEvery, CommHook: !plain}
}

// Synchronising reports whether a step run now reduces gradients: false inside NoSync.
func (d *DDP) Synchronising() bool { return !d.noSync }

// Who is the prefix of this rank's errors ("ddp: rank R").
func (d *DDP) Who() string { return d.who() }

// CheckDevice returns an error naming the first option a device implementation does not
// support yet: SyncBatchNorm (the device's BatchNorm has no statistics reducer) and
// communication hooks.
func (c DeviceConfig) CheckDevice() error {
	switch {
	case c.SyncBN:
		return fmt.Errorf("ddp: SyncBatchNorm is not on the device yet")
	case c.CommHook:
		return fmt.Errorf("ddp: communication hooks are not on the device yet (the device all-reduces each bucket)")
	}
	return nil
}
