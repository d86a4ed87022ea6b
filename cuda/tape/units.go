package tape

import (
	"fmt"
	"sort"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn"
)

// Unit is a gather unit of a unit state (NewUnitState): the parameters whose flat ranges
// (nn.ParamSet's layout) lie in [Lo, Hi). Their values live in a device block the
// UnitHooks hand the program while the unit is in use, not in a buffer of the state.
type Unit struct {
	Lo, Hi int
}

// Phase is the part of a Run a unit's readers are in: up to the loss, or after it.
type Phase int

const (
	// Forward is the steps up to and including the loss's (all steps of a program without
	// a loss).
	Forward Phase = iota
	// Backward is the steps after the loss's.
	Backward
)

func (ph Phase) String() string {
	if ph == Forward {
		return "forward"
	}
	return "backward"
}

// UnitHooks provide a unit state's parameters and gradient memory (ZeRO-3's gathers).
// A Run calls, on the Run's goroutine, Need before the first step of a phase that reads a
// unit's parameters and Done right after its last such step was enqueued, once per unit
// and phase with readers, in the order of Program.UnitSchedule; Grad at each gradient of
// a unit's parameter. A Run that fails may stop between a Need and its Done: the hooks
// own the blocks and free what is left.
type UnitHooks interface {
	// Need returns a device tensor of at least Hi-Lo float32 elements holding unit u's
	// parameters (element i is flat element Lo+i), valid in stream order from now until
	// Done(u, ph): the program's kernels read it on the device's stream.
	Need(u int, ph Phase) (*cuda.Tensor, error)
	// Done tells that the last step of ph reading unit u's parameters has been enqueued:
	// the block may be freed (the device's cache orders its reuse after those kernels).
	Done(u int, ph Phase) error
	// Grad returns the device tensor (at least Hi-Lo float32 elements, element i for flat
	// element Lo+i) that the gradients of unit u's parameters are added into.
	Grad(u int) (*cuda.Tensor, error)
}

// UnitEvent is one call of a Run's unit schedule: Need (before step Step) or Done (after).
type UnitEvent struct {
	Step  int
	Unit  int
	Phase Phase
	Need  bool
}

// unitCall is a Need or Done at a step, with the slots it binds or unbinds.
type unitCall struct {
	u    int
	ph   Phase
	need bool
}

// NewUnitState is a State with no parameter or gradient buffer: its programs read each
// unit's parameters from the block hooks.Need returns and add gradients into
// hooks.Grad's. Every parameter of m must lie in one unit. It has no optimizer; Params,
// Grads, ParamsToHost, FromHost, Step and GradRange are errors or nil on it, ZeroGrad does
// nothing (the hooks own the gradients).
func NewUnitState(dev *cuda.Device, m *nn.Model, units []Unit, hooks UnitHooks) (*State, error) {
	if dev == nil {
		return nil, fmt.Errorf("cuda/tape: no device (open one with cuda.Open)")
	}
	if m == nil || m.Params == nil || hooks == nil {
		return nil, fmt.Errorf("cuda/tape: nil model or unit hooks")
	}
	s := &State{dev: dev, model: m, views: map[*nn.Param][2]*cuda.Tensor{}, units: append([]Unit(nil), units...),
		hooks: hooks, unitOf: map[*nn.Param]int{}}
	for _, p := range m.Params.Params {
		i := sort.Search(len(units), func(i int) bool { return units[i].Hi > p.Offset })
		if i == len(units) || units[i].Lo > p.Offset || p.Offset+p.Numel() > units[i].Hi {
			return nil, fmt.Errorf("cuda/tape: parameter %s [%d,%d) lies in no one unit", p.Name, p.Offset, p.Offset+p.Numel())
		}
		s.unitOf[p] = i
	}
	return s, nil
}

// UnitSchedule is the order of the unit hooks' Need and Done calls of every Run (nil for a
// program of a state without units): a prefetching gatherer reads the next Needs from it.
func (p *Program) UnitSchedule() []UnitEvent {
	var ev []UnitEvent
	for i, st := range p.steps {
		for _, c := range st.unitsBefore {
			ev = append(ev, UnitEvent{Step: i, Unit: c.u, Phase: c.ph, Need: true})
		}
		for _, c := range st.unitsAfter {
			ev = append(ev, UnitEvent{Step: i, Unit: c.u, Phase: c.ph})
		}
	}
	return ev
}

// scheduleUnits computes, for a program of a unit state, each unit's first and last reader
// in each phase (a reader reads a parameter leaf of the unit or a view of one) and places
// the Need and Done calls on the steps. root maps a slot to the slot whose memory it views.
func (p *Program) scheduleUnits(root map[int]int) error {
	s := p.st
	p.uleaves = make([][]paramLeaf, len(s.units))
	p.uviews = make([][]int, len(s.units))
	leafUnit := map[int]int{}
	for _, pl := range p.pleaves {
		u, ok := s.unitOf[pl.param]
		if !ok {
			return fmt.Errorf("cuda/tape: parameter %s is not in the unit state's model", pl.param.Name)
		}
		leafUnit[pl.slot] = u
		p.uleaves[u] = append(p.uleaves[u], pl)
	}
	boundary := len(p.steps)
	for i, st := range p.steps {
		if p.loss >= 0 && st.out == p.loss {
			boundary = i
		}
	}
	type span struct{ first, last int }
	spans := make([][2]span, len(s.units))
	for u := range spans {
		spans[u] = [2]span{{-1, -1}, {-1, -1}}
	}
	for i, st := range p.steps {
		ph := Forward
		if i > boundary {
			ph = Backward
		}
		if st.alias {
			if u, ok := leafUnit[root[st.out]]; ok {
				p.uviews[u] = append(p.uviews[u], i)
			}
		}
		for _, x := range st.in {
			u, ok := leafUnit[root[x]]
			if !ok {
				continue
			}
			sp := &spans[u][ph]
			if sp.first < 0 {
				sp.first = i
			}
			sp.last = i
		}
	}
	for u := range spans {
		for ph, sp := range spans[u] {
			if sp.first < 0 {
				continue
			}
			p.steps[sp.first].unitsBefore = append(p.steps[sp.first].unitsBefore, unitCall{u, Phase(ph), true})
			p.steps[sp.last].unitsAfter = append(p.steps[sp.last].unitsAfter, unitCall{u, Phase(ph), false})
		}
	}
	return nil
}

// bindUnit asks the hooks for unit u's block and points the unit's parameter leaves (and
// the views of them already made in this Run, before step idx) at it.
func (p *Program) bindUnit(c unitCall, idx int) error {
	blk, err := p.st.hooks.Need(c.u, c.ph)
	if err != nil {
		return fmt.Errorf("unit %d (%s): %w", c.u, c.ph, err)
	}
	lo := p.st.units[c.u].Lo
	for _, pl := range p.uleaves[c.u] {
		v, err := blk.View(pl.param.Offset-lo, dims(pl.node)...)
		if err != nil {
			return fmt.Errorf("unit %d: parameter %s in its block: %w", c.u, pl.param.Name, err)
		}
		p.vals[pl.slot] = v
	}
	for _, i := range p.uviews[c.u] {
		st := &p.steps[i]
		if i >= idx || p.vals[st.in[0]] == nil {
			continue
		}
		v, err := p.vals[st.in[0]].View(0, st.shape...)
		if err != nil {
			return fmt.Errorf("unit %d: view %s: %w", c.u, st.node.Name(), err)
		}
		p.vals[st.out] = v
	}
	return nil
}

// unbindUnit forgets unit u's block (a later read without a Need is an error, not a read of
// freed memory) and tells the hooks.
func (p *Program) unbindUnit(c unitCall) error {
	for _, pl := range p.uleaves[c.u] {
		p.vals[pl.slot] = nil
	}
	for _, i := range p.uviews[c.u] {
		p.vals[p.steps[i].out] = nil
	}
	if err := p.st.hooks.Done(c.u, c.ph); err != nil {
		return fmt.Errorf("unit %d (%s): %w", c.u, c.ph, err)
	}
	return nil
}

// unitGrad is the view of unit u's gradient block where p's gradient is added.
func (s *State) unitGrad(p *nn.Param) (*cuda.Tensor, error) {
	u, ok := s.unitOf[p]
	if !ok {
		return nil, fmt.Errorf("cuda/tape: parameter %s is not in the unit state's model", p.Name)
	}
	blk, err := s.hooks.Grad(u)
	if err != nil {
		return nil, fmt.Errorf("cuda/tape: gradient block of unit %d: %w", u, err)
	}
	return blk.View(p.Offset-s.units[u].Lo, p.Shape...)
}
