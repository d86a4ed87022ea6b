package checkpoint

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// FuzzRestore checks that a checkpoint whose entries are well formed but wrong for the run
// that loads it (an entry of another shape, dtype or length, with any values, or missing)
// is refused by State.Restore with an error, never a panic (model, optimizer, scheduler,
// step, epoch and RNG), and that a run that took it can go on: an optimizer and scheduler
// step do not panic either.
//
// which picks the entry to change among a saved run's; how says what becomes of it: its
// dtype (float32, float64, int64) or its removal, and the run's optimizer and scheduler;
// dims (a byte a dimension) its shape; vals its values.
func FuzzRestore(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte{4, 3, 3, 3}, []byte{0, 0, 128, 63})
	f.Add(uint8(7), uint8(1), []byte{}, []byte{0, 0, 0, 0, 0, 0, 240, 127}) // +Inf
	f.Add(uint8(12), uint8(2), []byte{2}, []byte{255, 255, 255, 255, 255, 255, 255, 127})
	f.Add(uint8(20), uint8(3), []byte{1}, []byte{})
	f.Add(uint8(30), uint8(6), []byte{0}, []byte{1})
	f.Fuzz(func(t *testing.T, which, how uint8, dims, vals []byte) {
		adam, oneCycle := how&4 != 0, how&8 != 0
		saved := restoreRun(t, adam, oneCycle)
		saved.train(3)
		entries, err := saved.state.Entries()
		if err != nil {
			t.Fatal(err)
		}
		entries = cloneEntries(entries)
		i := int(which) % len(entries)
		if how&3 == 3 {
			entries = slices.Delete(entries, i, i+1)
		} else {
			entries[i] = changed(entries[i].Name, how&3, dims, vals)
		}
		run := restoreRun(t, adam, oneCycle)
		if _, err := run.state.Restore(entries); err != nil {
			return
		}
		run.train(1)
	})
}

// restoreRunState is a small training run: parameters, optimizer, scheduler, RNG.
type restoreRunState struct {
	ps  *nn.ParamSet
	opt interface {
		Step() error
		LR() float64
	}
	sched optim.Scheduler
	rng   *rand.PCG
	state *State
}

// restoreRun builds tiny's parameters with SGD (momentum) or AdamW and a cosine or
// one-cycle schedule.
func restoreRun(t *testing.T, adam, oneCycle bool) *restoreRunState {
	ps := tiny(t)
	for i := range ps.Data {
		ps.Data[i] = float32(i%7) / 7
	}
	segs, err := optim.Segments(ps, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	r := &restoreRunState{ps: ps, rng: rand.NewPCG(1, 2)}
	var target optim.LRTarget
	var stateful Stateful
	if adam {
		o, err := optim.NewAdamW(segs, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		r.opt, target, stateful = o, o, o
	} else {
		o, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
		if err != nil {
			t.Fatal(err)
		}
		r.opt, target, stateful = o, o, o
	}
	if oneCycle {
		r.sched, err = optim.NewOneCycleLR(target, 0.5, 10, optim.OneCycle{})
	} else {
		r.sched, err = optim.NewCosineAnnealingLR(target, 10, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.state = &State{Model: ps, Optimizer: stateful, Scheduler: r.sched, RNG: map[string]RNG{"data": r.rng}}
	return r
}

// train takes steps steps on random gradients, counting them in bn1.num_batches_tracked.
func (r *restoreRunState) train(steps int) {
	rng := rand.New(r.rng)
	for range steps {
		for i := range r.ps.Grad {
			r.ps.Grad[i] = float32(rng.NormFloat64())
		}
		_ = r.opt.Step()
		r.sched.Step()
		r.ps.Buffer("bn1.num_batches_tracked").Int64[0]++
	}
}

// changed is an entry named name of dtype kind (0 float32, 1 float64, 2 int64), a dimension
// a byte of dims, and the values read from vals (little-endian), as many as the shape holds
// or as vals has.
func changed(name string, kind uint8, dims, vals []byte) nn.StateEntry {
	e := nn.StateEntry{Name: name, Shape: []int{}}
	for _, d := range dims {
		e.Shape = append(e.Shape, int(d))
	}
	size := []int{4, 8, 8}[kind]
	n := len(vals) / size
	switch kind {
	case 0:
		for j := range n {
			e.F32 = append(e.F32, math.Float32frombits(binary.LittleEndian.Uint32(vals[size*j:])))
		}
	case 1:
		for j := range n {
			e.F64 = append(e.F64, math.Float64frombits(binary.LittleEndian.Uint64(vals[size*j:])))
		}
	default:
		for j := range n {
			e.I64 = append(e.I64, int64(binary.LittleEndian.Uint64(vals[size*j:])))
		}
	}
	return e
}

// cloneEntries copies entries, which alias the live state.
func cloneEntries(entries []nn.StateEntry) []nn.StateEntry {
	out := make([]nn.StateEntry, len(entries))
	for i, e := range entries {
		out[i] = nn.StateEntry{Name: e.Name, Shape: slices.Clone(e.Shape), F32: slices.Clone(e.F32), F64: slices.Clone(e.F64), I64: slices.Clone(e.I64)}
	}
	return out
}
