package nn

import "fmt"

// StateEntry is one named tensor of a state dict: a parameter, a buffer, a piece of
// optimizer state or a scalar such as the epoch. Exactly one of F32, F64 and I64 is set.
// Names follow torchvision's state_dict keys for model state ("layer1.0.conv1.weight").
type StateEntry struct {
	Name  string
	Shape []int
	F32   []float32
	F64   []float64
	I64   []int64
}

// Numel is the number of elements of the entry.
func (e StateEntry) Numel() int {
	switch {
	case e.F32 != nil:
		return len(e.F32)
	case e.F64 != nil:
		return len(e.F64)
	default:
		return len(e.I64)
	}
}

// ModelState returns the model's state dict in registration order: every parameter, then
// every buffer, as torchvision orders module state (parameters and buffers of each module
// interleave in torchvision; key order carries no meaning in .npz files). The entries alias
// the model's memory: copy them before the model changes if you need a snapshot.
func (ps *ParamSet) ModelState() []StateEntry {
	out := make([]StateEntry, 0, len(ps.Params)+len(ps.Buffers))
	for _, p := range ps.Params {
		out = append(out, StateEntry{Name: p.Name, Shape: p.Shape, F32: p.Data})
	}
	for _, b := range ps.Buffers {
		e := StateEntry{Name: b.Name, Shape: b.Shape}
		if b.Int64 != nil {
			e.I64 = b.Int64
		} else {
			e.F32 = b.Data
		}
		out = append(out, e)
	}
	return out
}

// LoadReport lists what a state-dict load found wrong, by key.
type LoadReport struct {
	Missing    []string // keys the model has and the state dict lacks
	Unexpected []string // keys the state dict has and the model lacks
	Mismatched []string // keys present in both with different shapes, as "key: got [..], want [..]"
}

// OK reports whether nothing was missing, unexpected or mis-shaped.
func (r LoadReport) OK() bool {
	return len(r.Missing) == 0 && len(r.Unexpected) == 0 && len(r.Mismatched) == 0
}

func (r LoadReport) String() string {
	return fmt.Sprintf("missing keys %q, unexpected keys %q, mis-shaped keys %q", r.Missing, r.Unexpected, r.Mismatched)
}
