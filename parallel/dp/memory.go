package dp

import (
	"fmt"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// ReplicaMemory is the memory one replica holds, in bytes.
type ReplicaMemory struct {
	Replica int
	Device  Device
	// Graph is the tensor values held by the replica's compiled programs after their last
	// run (input chunks, activations, gradients), one set per cached chunk size. Parameter
	// values are not counted (they are the master's); op-internal scratch is not either.
	Graph int64
	// GradBuffer is the replica's flat gradient buffer.
	GradBuffer int64
	// Params, Buffers, Grad, OptimizerState and Gathered are held by the master only: the
	// parameter values (shared read-only by CPU replicas), the running statistics, the
	// master's gradient buffer (nn.ParamSet.Grad), the optimizer's state and the gathered
	// outputs.
	Params, Buffers, Grad, OptimizerState, Gathered int64
}

// Total is the sum of the fields.
func (m ReplicaMemory) Total() int64 {
	return m.Graph + m.GradBuffer + m.Params + m.Buffers + m.Grad + m.OptimizerState + m.Gathered
}

// MemoryReport lists the memory of every replica.
type MemoryReport struct {
	Replicas []ReplicaMemory
}

// Imbalance is the largest replica total over the smallest (1 when balanced); it counts only
// replicas that hold something (that have run).
func (r MemoryReport) Imbalance() float64 {
	var lo, hi int64
	for _, m := range r.Replicas {
		t := m.Total()
		if t == 0 {
			continue
		}
		if lo == 0 || t < lo {
			lo = t
		}
		hi = max(hi, t)
	}
	if lo == 0 {
		return 0
	}
	return float64(hi) / float64(lo)
}

// String prints one line per replica, in MiB.
func (r MemoryReport) String() string {
	var b strings.Builder
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	for _, m := range r.Replicas {
		fmt.Fprintf(&b, "replica %d (%s): %.1f MiB = graph %.1f + grad buffer %.1f", m.Replica, m.Device, mib(m.Total()), mib(m.Graph), mib(m.GradBuffer))
		if m.Replica == 0 {
			fmt.Fprintf(&b, " + params %.1f + buffers %.2f + grad %.1f + optimizer %.1f + gathered %.3f", mib(m.Params), mib(m.Buffers), mib(m.Grad), mib(m.OptimizerState), mib(m.Gathered))
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "imbalance (max/min) %.2f", r.Imbalance())
	return b.String()
}

// Memory reports what each replica holds now. opt, when not nil, is the optimizer stepping
// the master's parameters; its state is counted on the master. Graph and GradBuffer are
// measured in host memory: on another backend (devices, whose allocators report their own
// memory) they are 0.
func (d *DataParallel) Memory(opt optim.Optimizer) MemoryReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, host := d.be.(*hostBackend)
	var rep MemoryReport
	for _, r := range d.replicas {
		m := ReplicaMemory{Replica: r.index, Device: r.dev}
		training := false
		for _, x := range r.progs {
			if p := x.Compiled(); host {
				m.Graph += ProgramBytes(p)
				training = training || (p.Builder.Training() && p.Loss != nil)
			}
		}
		if training {
			m.GradBuffer = 4 * int64(len(h.grads[r.index]))
		}
		if r.index == 0 {
			ps := d.model.Params
			m.Params, m.Grad = 4*int64(len(ps.Data)), 4*int64(len(ps.Grad))
			for _, b := range ps.Buffers {
				m.Buffers += 4*int64(len(b.Data)) + 8*int64(len(b.Int64))
			}
			for _, g := range d.gathered {
				m.Gathered += 4 * int64(len(g))
			}
			if opt != nil {
				m.OptimizerState = optim.StateBytes(opt)
			}
		}
		rep.Replicas = append(rep.Replicas, m)
	}
	return rep
}

// ProgramBytes is the size of the tensor values a compiled program's graph holds after a
// run: inputs, activations and gradients, each distinct memory block counted once, the
// parameters bound to the model's flat buffer excluded. Memory private to ops (im2col
// scratch, saved statistics) is not visible to it. It works for any nn.Program, so DDP ranks
// can be measured alike.
func ProgramBytes(p *nn.Program) int64 {
	type block interface {
		Uintptr() uintptr
		MemSize() uintptr
	}
	params := map[uintptr]bool{}
	for _, prm := range p.Builder.UsedParams() {
		if leaf := p.Builder.Leaf(prm); leaf != nil && leaf.Value() != nil {
			if m, ok := leaf.Value().(block); ok {
				params[m.Uintptr()] = true
			}
		}
	}
	sizes := map[uintptr]uintptr{}
	for _, n := range p.Builder.Graph.AllNodes() {
		v := n.Value()
		if v == nil {
			continue
		}
		m, ok := v.(block)
		if !ok || params[m.Uintptr()] {
			continue
		}
		sizes[m.Uintptr()] = max(sizes[m.Uintptr()], m.MemSize())
	}
	var total int64
	for _, s := range sizes {
		total += int64(s)
	}
	return total
}
