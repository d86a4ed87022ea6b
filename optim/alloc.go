package optim

import "fmt"

// Allocator gives an optimizer zeroed float32 memory for its per-element state. An
// optimizer asks once per kind of state, for one buffer covering every segment in order
// (so the buffer's layout is the segments' concatenation), and keeps it for its lifetime.
// Who owns the allocator releases the memory: a ZeRO engine, for example, hands out Go heap
// memory, offloaded CPU memory or memory-mapped files under disk offload.
type Allocator interface {
	// Alloc returns n zeroed float32 values for the state called name ("exp_avg",
	// "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"), or an error naming what failed.
	Alloc(name string, n int) ([]float32, error)
}

// HeapAllocator is the default Allocator: Go heap memory, freed by the garbage collector.
type HeapAllocator struct{}

// Alloc returns make([]float32, n).
func (HeapAllocator) Alloc(_ string, n int) ([]float32, error) { return make([]float32, n), nil }

// WithAllocator makes the optimizer take its per-element state (Adam's moments, SGD's
// momentum buffers) from a (default HeapAllocator).
func WithAllocator(a Allocator) Option { return func(c *config) { c.alloc = a } }

// StateBytes is the memory of the per-element state the optimizer allocated, 4 bytes per
// float32 wherever the allocator put it; the scalars (step, learning rate) are not counted.
func (b *base) StateBytes() int64 { return 4 * b.stateElems }

// StateBytes is the memory of opt's state: its own StateBytes where it has one (this
// package's optimizers: the per-element state they allocated), else the size of the
// tensors of its state dict, which alias the state.
func StateBytes(opt Optimizer) int64 {
	if s, ok := opt.(interface{ StateBytes() int64 }); ok {
		return s.StateBytes()
	}
	var n int64
	for _, e := range opt.StateDict() {
		n += 4*int64(len(e.F32)) + 8*int64(len(e.F64)+len(e.I64))
	}
	return n
}

// allocState takes one buffer for the state kind from the configured allocator and cuts it
// into one slice per segment.
func (b *base) allocState(kind string) ([][]float32, error) {
	n := 0
	for _, s := range b.segs {
		n += len(s.Data)
	}
	a := b.cfg.alloc
	if a == nil {
		a = HeapAllocator{}
	}
	buf, err := a.Alloc(kind, n)
	if err != nil {
		return nil, fmt.Errorf("state %s (%d elements): %w", kind, n, err)
	}
	if len(buf) != n {
		return nil, fmt.Errorf("state %s: allocator returned %d elements, want %d", kind, len(buf), n)
	}
	b.stateElems += int64(n)
	out := make([][]float32, len(b.segs))
	off := 0
	for i, s := range b.segs {
		end := off + len(s.Data)
		out[i] = buf[off:end:end]
		off = end
	}
	return out, nil
}
