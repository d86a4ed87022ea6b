package zero

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/internal/region"
	"github.com/gorgonia-parallel/gp/optim"
)

// Memory is a rank's model-state accounting, counted from the engine's own buffers.
type Memory struct {
	// Psi is the number of parameters (Ψ), World the world size.
	Psi, World int
	// PaddingElems is how many elements of this rank's shard buffers hold no parameter.
	PaddingElems int
	// MasterBytes, GradBytes and StateBytes are the float32 master shard, gradient shard
	// and optimizer state, wherever they live.
	MasterBytes, GradBytes, StateBytes int64
	// FileBytes is the part of the above that lives in memory-mapped files (disk offload),
	// FileResidentBytes how much of it is in this process's memory now (mincore).
	FileBytes, FileResidentBytes int64
	// TransientResidentBytes is what the step's regions (gathered parameters,
	// reduce-scatter buffers) and the model's placeholders hold in memory now: 0 between
	// steps. Pages a step freed lazily (MADV_FREE: the kernel takes them when it needs
	// memory, and until then the next step reuses them without a page fault) are not
	// held; the process's VmRSS counts them until the kernel takes them.
	TransientResidentBytes int64
	// PeakStepBytes is the peak model-state footprint of the last run (StepStats.PeakBytes).
	// Like the persistent state it is counted from the engine's buffers.
	PeakStepBytes int64
}

// ModelStateBytes is the persistent model state: master, gradient and optimizer state.
func (m Memory) ModelStateBytes() int64 { return m.MasterBytes + m.GradBytes + m.StateBytes }

// InMemoryBytes is the model state resident in this process's memory now: the persistent
// state minus what sits in files and is not paged in, plus the step's regions.
func (m Memory) InMemoryBytes() int64 {
	return m.ModelStateBytes() - m.FileBytes + m.FileResidentBytes + m.TransientResidentBytes
}

// FormulaBytes is the ZeRO paper's 16·Ψ/N for float32 AdamW (4 master + 4 gradient + 8
// optimizer state bytes per parameter).
func (m Memory) FormulaBytes() float64 { return 16 * float64(m.Psi) / float64(m.World) }

// PaddingBytes is the formula's allowance for padding: 16 bytes per padding element.
func (m Memory) PaddingBytes() int64 { return 16 * int64(m.PaddingElems) }

func (m Memory) String() string {
	return fmt.Sprintf("Ψ=%d N=%d: model state %d B (master %d, grad %d, optimizer %d; %d in files, %d of them resident), formula 16Ψ/N = %.0f B, padding %d elements, transient resident %d B, step peak %d B",
		m.Psi, m.World, m.ModelStateBytes(), m.MasterBytes, m.GradBytes, m.StateBytes, m.FileBytes, m.FileResidentBytes, m.FormulaBytes(), m.PaddingElems, m.TransientResidentBytes, m.PeakStepBytes)
}

// Memory reports this rank's model-state memory. With a backend, the layout's fields and
// what the backend counts (Backend.CountMemory); the file and transient fields are the
// host's.
func (e *Engine) Memory() Memory {
	m := Memory{Psi: e.lay.psi, World: e.world, PaddingElems: e.lay.paddingElems(), PeakStepBytes: e.peak}
	if e.be != nil {
		e.be.CountMemory(&m)
		return m
	}
	m.MasterBytes = 4 * int64(len(e.master))
	m.GradBytes = 4 * int64(len(e.grad))
	m.StateBytes = optim.StateBytes(e.opt)
	if fa, ok := e.alloc.(*fileAlloc); ok {
		for _, r := range fa.regions {
			m.FileBytes += 4 * int64(len(r.Floats()))
			m.FileResidentBytes += r.Resident()
		}
	}
	if e.masterR != nil {
		m.FileBytes += m.MasterBytes
		m.FileResidentBytes += e.masterR.Resident()
	}
	for _, r := range []*region.Region{e.gatherR, e.sendR, e.recvR} {
		m.TransientResidentBytes += r.Held()
	}
	for _, r := range []*region.Region{e.leaves, e.placeholder, e.gradHolder} {
		m.TransientResidentBytes += r.Resident()
	}
	return m
}

// persistentBytes is master + gradient + optimizer state held in memory.
func (e *Engine) persistentBytes() int64 {
	b := 4*int64(len(e.grad)) + optim.StateBytes(e.opt)
	if e.masterR == nil {
		b += 4 * int64(len(e.master))
	}
	return b
}
