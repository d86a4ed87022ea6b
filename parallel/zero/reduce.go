package zero

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// ReduceSchedule is ZeRO-3's gradient schedule, one for every backend. In backward (Arrive)
// it counts down each unit's parameters as their gradients arrive, launches the unit's
// reduce-scatter when the count reaches zero and retires the launched units in launch order
// (the backend adds each result into the gradient shard and frees the unit's buffers).
// After the tape, Finish launches the units whose gradients are incomplete (parameters that
// do not reach the loss; in unit order, so every rank issues the same collectives), retires
// the rest and waits for the collectives. A UnitReducer moves the bytes (W is its
// collectives' type): this package's host buffers over comm.Group, cuda/devzero's device
// blocks over NCCL. On the host a unit is retired once its reduce-scatter has completed; in
// stream order (the device) once the next unit is launched, with no host wait: Retire makes
// the stream wait. Begin, Arrive and Finish are called in this order from the Run's goroutine.
type ReduceSchedule[W comm.Work] struct {
	r            UnitReducer[W]
	units        []*Unit
	unitOf, need []int  // by Param.Index; by unit, the gradients that complete it
	left         []int  // by unit: gradients still to arrive
	got          []bool // by Param.Index: arrived in this Run
	works        []W    // by unit: launched, not yet waited for
	order        []int  // launched units, in launch order; order[:done] are retired
	done         int
	stream       bool
	ctx          context.Context
	err          error // the Run's first
}

// UnitReducer is what a ReduceSchedule drives: one unit's reduce-scatter on a backend.
type UnitReducer[W comm.Work] interface {
	// Launch starts unit u's reduce-scatter after the gradients written so far and returns
	// it, or nil when u has nothing to reduce (Retire is still called).
	Launch(u int) W
	// Retire adds u's reduction w into the gradient shard and frees u's buffers (in stream
	// order, after making the stream wait for w).
	Retire(u int, w W) error
}

// NewReduceSchedule returns the gradient schedule of lay's units over r, in which a unit is
// complete once the gradients of its parameters among used have arrived (a unit with none
// is not reduced), retiring in stream order when streamOrdered.
func NewReduceSchedule[W comm.Work](lay *Layout, used []*nn.Param, r UnitReducer[W], streamOrdered bool) *ReduceSchedule[W] {
	nu := len(lay.units)
	s := &ReduceSchedule[W]{r: r, units: lay.units, unitOf: lay.unitOf, stream: streamOrdered, need: make([]int, nu),
		left: make([]int, nu), got: make([]bool, len(lay.unitOf)), works: make([]W, nu), order: make([]int, 0, nu)}
	for _, p := range used {
		s.need[lay.unitOf[p.Index]]++
	}
	return s
}

// Begin starts a Run under ctx.
func (s *ReduceSchedule[W]) Begin(ctx context.Context) {
	s.ctx, s.order, s.done, s.err = ctx, s.order[:0], 0, nil
	copy(s.left, s.need)
	clear(s.got)
	clear(s.works)
}

// Arrive counts p's gradient, launching its unit's reduce-scatter when it completes the
// unit, retires the launched units that can be without blocking, and says whether p's is
// the unit's first gradient. A gradient that arrives twice, or that its unit does not wait
// for, is an error (and the Run's).
func (s *ReduceSchedule[W]) Arrive(p *nn.Param) (first bool, err error) {
	u := s.unitOf[p.Index]
	if s.got[p.Index] || s.left[u] == 0 {
		return false, s.fail(fmt.Errorf("gradient of %s arrived twice in one Run, or after its unit's reduce-scatter", p.Name))
	}
	s.got[p.Index] = true
	if s.left[u]--; s.left[u] == 0 {
		s.order = append(s.order, u)
		s.works[u] = s.r.Launch(u)
	}
	s.sweep(false)
	return s.left[u] == s.need[u]-1, s.err
}

// arrived is whether p's gradient has arrived in this Run.
func (s *ReduceSchedule[W]) arrived(p *nn.Param) bool { return s.got[p.Index] }

// Finish ends the Run whose tape returned runErr: unless the Run failed it launches the
// incomplete units and retires every launched unit; it waits for the collectives and
// returns the Run's errors.
func (s *ReduceSchedule[W]) Finish(runErr error) error {
	if runErr == nil && s.err == nil {
		for u, n := range s.left {
			if n > 0 {
				s.left[u] = 0
				s.order = append(s.order, u)
				s.works[u] = s.r.Launch(u)
			}
		}
		s.sweep(true)
	}
	err := errors.Join(runErr, s.err)
	for _, u := range s.order {
		if e := s.wait(u); e != nil {
			err = errors.Join(err, e)
		}
	}
	return err
}

// sweep retires launched units in launch order (all of them, or those that can be without
// blocking), each after waiting for its reduce-scatter (in stream order only if it has
// ended: a failure ends there).
func (s *ReduceSchedule[W]) sweep(all bool) {
	for s.err == nil && s.done < len(s.order) {
		u := s.order[s.done]
		w := s.works[u]
		if !all && (s.stream && s.done == len(s.order)-1 || !s.stream && !ended(w)) {
			return
		}
		s.done++
		if (!s.stream || ended(w)) && s.fail(s.wait(u)) != nil {
			return
		}
		if err := s.r.Retire(u, w); err != nil {
			s.fail(fmt.Errorf("unit %s's gradient shard: %w", s.units[u].Name, err))
		}
	}
}

// wait waits for unit u's reduce-scatter unless it has been waited for.
func (s *ReduceSchedule[W]) wait(u int) error {
	w := comm.Work(s.works[u])
	if w == nil {
		return nil
	}
	clear(s.works[u : u+1])
	if err := w.Wait(s.ctx); err != nil {
		return fmt.Errorf("reduce-scatter of unit %s: %w", s.units[u].Name, err)
	}
	return nil
}

// ended is whether w, when not nil, has completed.
func ended[W comm.Work](w W) bool {
	if comm.Work(w) == nil {
		return true
	}
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// fail keeps err, when not nil, as the Run's first error and returns it.
func (s *ReduceSchedule[W]) fail(err error) error {
	if s.err == nil {
		s.err = err
	}
	return err
}
