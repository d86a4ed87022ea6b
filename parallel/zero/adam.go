package zero

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gorgonia-parallel/gp/internal/region"
	"github.com/gorgonia-parallel/gp/optim"
)

// OptimizerFunc builds the optimizer of a rank's shard over its segments, taking state
// memory from mem: the engine's allocator, which hands out Go heap memory (no offload,
// OffloadCPU) or one memory-mapped file per buffer under OffloadDisk, and releases it with
// the engine. Any optimizer of package optim fits when handed optim.WithAllocator(mem):
//
//	func(segs []optim.Segment, mem optim.Allocator) (optim.Optimizer, error) {
//		return optim.NewSGD(segs, lr, optim.WithMomentum(0.9), optim.WithAllocator(mem))
//	}
type OptimizerFunc func(segs []optim.Segment, mem optim.Allocator) (optim.Optimizer, error)

// Optim adapts a constructor of package optim that takes no allocator (optim.NewSGD,
// optim.NewAdamW, ... in a closure) to an OptimizerFunc. Such an optimizer allocates its
// state on the Go heap, so it cannot be combined with OffloadDisk (New fails); hand it
// optim.WithAllocator in an OptimizerFunc instead.
func Optim(f func(segs []optim.Segment) (optim.Optimizer, error)) OptimizerFunc {
	return func(segs []optim.Segment, mem optim.Allocator) (optim.Optimizer, error) {
		if _, ok := mem.(*fileAlloc); ok {
			return nil, fmt.Errorf("zero: an optimizer built by zero.Optim keeps its state on the heap; under OffloadDisk pass optim.WithAllocator(mem) in an OptimizerFunc, or use zero.AdamW")
		}
		return f(segs)
	}
}

// AdamW returns the shard's torch.optim.AdamW: optim.NewAdamW over the rank's segments with
// its moments (exp_avg, exp_avg_sq, and max_exp_avg_sq with optim.WithAMSGrad) taken from
// the engine's allocator, one buffer each over the whole shard: heap, or files under
// OffloadDisk. Being optim's AdamW, it is bit-identical to optim's AdamW on the same
// segments, implements optim.Ranged, and its state dict uses optim's keys
// ("optim.<param>.exp_avg[lo:hi]"), so it loads into optim's optimizers and back. opts are
// optim's (optim.WithBetas, optim.WithEps, optim.WithAMSGrad, ...); without
// optim.WithWorkers the update runs on one goroutine, or on WithOffload's workers under
// offload.
func AdamW(lr float64, opts ...optim.Option) OptimizerFunc {
	opts = slices.Clone(opts)
	return func(segs []optim.Segment, mem optim.Allocator) (optim.Optimizer, error) {
		var all []optim.Option
		if w, ok := mem.(updateWorkers); ok {
			all = append(all, optim.WithWorkers(w.updateWorkers(), 1<<15)) // optim.WithWorkers in opts wins
		}
		all = append(append(all, opts...), optim.WithAllocator(mem))
		o, err := optim.NewAdamW(segs, lr, all...)
		if err != nil {
			return nil, fmt.Errorf("zero: AdamW: %w", err)
		}
		return o, nil
	}
}

// fileAlloc maps one file per buffer under dir.
type fileAlloc struct {
	dir     string
	rank    int
	workers int
	regions []*region.Region
}

// HeapAlloc is the engine's allocator without disk offload: Go heap memory. Workers is the
// goroutine count AdamW gives its update under offload (unless it is given optim.WithWorkers);
// when State is not nil, every buffer handed out is kept in it by name (the device engine
// stages its moments into them for a checkpoint).
type HeapAlloc struct {
	Workers int
	State   map[string][]float32
}

// Alloc returns n zeroed float32 values on the Go heap.
func (a HeapAlloc) Alloc(name string, n int) ([]float32, error) {
	b := make([]float32, n)
	if a.State != nil {
		a.State[name] = b
	}
	return b, nil
}

// updateWorkers is what the engine's allocators tell AdamW: the offload's goroutine count.
type updateWorkers interface{ updateWorkers() int }

func (a HeapAlloc) updateWorkers() int  { return a.Workers }
func (f *fileAlloc) updateWorkers() int { return f.workers }

func (f *fileAlloc) Alloc(name string, n int) ([]float32, error) {
	path := fmt.Sprintf("%s/rank%d-%s.f32", f.dir, f.rank, name)
	r, err := mapFile(fmt.Sprintf("rank %d %s", f.rank, name), path, n)
	if err != nil {
		return nil, err
	}
	f.regions = append(f.regions, r)
	return r.Floats(), nil
}

// mapFile maps a disk-offload file region; where files cannot be mapped (errors.ErrUnsupported)
// its error says to offload to memory instead.
func mapFile(name, path string, n int) (*region.Region, error) {
	r, err := region.NewFile(name, path, n)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, fmt.Errorf("zero: disk offload: %w; use OffloadCPU", err)
	}
	return r, regionErr(err)
}

// regionErr prefixes an error of the engine's memory regions (which name the region) with
// the package, as the engine's other errors are; nil stays nil.
func regionErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("zero: %w", err)
}
