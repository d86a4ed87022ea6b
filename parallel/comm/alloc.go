package comm

import (
	"context"
	"fmt"
	"unsafe"
)

// AllocFloat32 returns n zeroed float32s for a buffer that g reduces often, such as DDP's
// gradient buffer. When the ranks of g share this host's memory (the shared-memory
// transport, world 2 or more), the memory is a shared mapping that every other rank maps
// too, and an AllReduce on any sub-slice of it (the same sub-slice on every rank) reads the
// peers' inputs and writes the results in place: no staging copies, half the memory
// traffic. Otherwise, or when the shared memory cannot be had (/dev/shm full, more than
// 48 such buffers), it is ordinary memory and everything works the same, only slower.
//
// AllocFloat32 is a collective: every rank calls it with the same n, in the same order
// relative to the other collectives. The memory stays valid after g is closed, until the
// process ends; it is not reclaimed by the garbage collector, so allocate once per model.
func AllocFloat32(ctx context.Context, g Group, n int) ([]float32, error) {
	if n <= 0 {
		return make([]float32, max(n, 0)), nil
	}
	if a, ok := g.(sharedAllocator); ok {
		b, err := a.allocShared(ctx, 4*n)
		if err != nil {
			return nil, fmt.Errorf("rank %d: shared allocation of %d float32: %w", g.Rank(), n, err)
		}
		if b != nil {
			return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), nil
		}
	}
	return make([]float32, n), nil
}

// sharedAllocator is a group that may place buffers in memory its peers map.
type sharedAllocator interface {
	// allocShared returns nbytes of shared memory, or nil (and no error) when the ranks
	// agreed to use ordinary memory.
	allocShared(ctx context.Context, nbytes int) ([]byte, error)
}

// regionTransport is a transport that can share buffers between ranks (the shm transport).
type regionTransport interface {
	// newRegion creates this rank's next region of nbytes and publishes its name; it
	// returns the region's index (the same on every rank) or an error.
	newRegion(nbytes int) (int, error)
	// mapRegion maps every peer's region id.
	mapRegion(id, nbytes int) error
	// commitRegion ends the region's setup: with ok, it becomes usable and its file is
	// unlinked; without, everything about it is released. It returns the region's memory
	// when ok.
	commitRegion(id int, ok bool) []byte
}

func (g *group) allocShared(ctx context.Context, nbytes int) ([]byte, error) {
	rt, ok := g.t.(regionTransport)
	if !ok || g.size < 2 {
		return nil, nil
	}
	id, err := rt.newRegion(nbytes)
	if id < 0 {
		return nil, nil // no staging area, or the table is full on every rank alike
	}
	agree := func(ok bool) (bool, error) {
		v := I64{0}
		if ok {
			v[0] = 1
		}
		if err := g.AllReduce(v, Min).Wait(ctx); err != nil {
			return false, err
		}
		return v[0] == 1, nil
	}
	all, aerr := agree(err == nil)
	if aerr != nil {
		rt.commitRegion(id, false)
		return nil, aerr
	}
	if all {
		err = rt.mapRegion(id, nbytes)
		if all, aerr = agree(err == nil); aerr != nil {
			rt.commitRegion(id, false)
			return nil, aerr
		}
	}
	if !all {
		if err != nil {
			g.cfg.logger.Debug("comm: shared buffer unavailable, using ordinary memory", "rank", g.rank, "reason", err)
		}
		rt.commitRegion(id, false)
		return nil, nil
	}
	return rt.commitRegion(id, true), nil
}
