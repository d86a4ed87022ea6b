package tape_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
)

// poisonHooks hand out each unit's parameters in a fresh block copied from the host and, at
// Done, overwrite the block with NaN (in stream order, after the kernels enqueued so far)
// before freeing it at the end: a step that read a unit after its Done would turn the
// loss or a gradient into NaN.
type poisonHooks struct {
	d       *cuda.Device
	data    []float32
	units   []tape.Unit
	blocks  map[int]*cuda.Tensor
	grads   map[int]*cuda.Tensor
	dead    []*cuda.Tensor
	log     []tape.UnitEvent
	live    int
	maxLive int
}

func (h *poisonHooks) Need(u int, ph tape.Phase) (*cuda.Tensor, error) {
	un := h.units[u]
	if h.blocks[u] != nil {
		return nil, fmt.Errorf("unit %d needed while in use", u)
	}
	b, err := h.d.FromHost(h.data[un.Lo:un.Hi], un.Hi-un.Lo)
	if err != nil {
		return nil, err
	}
	h.blocks[u] = b
	h.live++
	h.maxLive = max(h.maxLive, h.live)
	h.log = append(h.log, tape.UnitEvent{Unit: u, Phase: ph, Need: true})
	return b, nil
}

func (h *poisonHooks) Done(u int, ph tape.Phase) error {
	b := h.blocks[u]
	if b == nil {
		return fmt.Errorf("unit %d done but not in use", u)
	}
	nan := make([]float32, b.Len())
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	h.blocks[u] = nil
	h.dead = append(h.dead, b)
	h.live--
	h.log = append(h.log, tape.UnitEvent{Unit: u, Phase: ph})
	return b.CopyFrom(nan)
}

func (h *poisonHooks) Grad(u int) (*cuda.Tensor, error) {
	if g := h.grads[u]; g != nil {
		return g, nil
	}
	un := h.units[u]
	g, err := h.d.Alloc(cuda.Float32, un.Hi-un.Lo)
	if err == nil {
		err = h.d.Zero(g)
	}
	h.grads[u] = g
	return g, err
}

// A program of a unit state (one unit per parameter of the perceptron) computes the loss
// and the gradients of a program of a plain State bit for bit, though every unit's block
// is poisoned with NaN right after its Done: Done comes after the unit's last reader of the
// phase, and Need before its first (a read before a Need is an error, not a NaN). The
// hooks are called in UnitSchedule's order, each Need closed by its Done before the unit
// is needed again, in forward and again in backward.
func TestUnitStateMatchesState(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	const batch = 4
	build := gormlp.Fixed(1, batch)
	mRef, mUnit := graphModel(t, build), graphModel(t, build)
	ref, err := tape.NewState(d, mRef)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	var units []tape.Unit
	for _, p := range mUnit.Params.Params {
		units = append(units, tape.Unit{Lo: p.Offset, Hi: p.Offset + p.Numel()})
	}
	slices.SortFunc(units, func(a, b tape.Unit) int { return a.Lo - b.Lo })
	h := &poisonHooks{d: d, data: mUnit.Params.Data, units: units, blocks: map[int]*cuda.Tensor{}, grads: map[int]*cuda.Tensor{}}
	defer func() {
		for _, b := range h.dead {
			b.Free()
		}
		for _, g := range h.grads {
			g.Free()
		}
	}()
	ust, err := tape.NewUnitState(d, mUnit, units, h)
	if err != nil {
		t.Fatal(err)
	}
	defer ust.Close()
	pr, err := ref.Compile(build)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	pu, err := ust.Compile(build)
	if err != nil {
		t.Fatal(err)
	}
	defer pu.Close()
	x, y := make([]float32, batch*gormlp.In), make([]float32, batch*gormlp.Out)
	gormlp.Data(x, y, 0, batch)
	for _, p := range []*tape.Program{pr, pu} {
		if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y), p.Run(ctx)); err != nil {
			t.Fatal(err)
		}
	}
	lr, err := pr.LossValue()
	if err != nil {
		t.Fatal(err)
	}
	lu, err := pu.LossValue()
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Grads().ToHost(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(want))
	for u, g := range h.grads {
		if err := g.CopyTo(ctx, got[units[u].Lo:units[u].Hi]); err != nil {
			t.Fatal(err)
		}
	}
	if lu != lr || !slices.Equal(got, want) {
		t.Errorf("unit state: loss %v and gradients %v, want %v and %v (plain State)", lu, got, lr, want)
	}
	var sched []tape.UnitEvent
	phases := map[tape.Phase]bool{}
	for _, ev := range pu.UnitSchedule() {
		ev.Step = 0
		sched = append(sched, ev)
		phases[ev.Phase] = true
	}
	if !slices.Equal(h.log, sched) || !phases[tape.Forward] || !phases[tape.Backward] {
		t.Errorf("hook calls %v, want the schedule %v, with forward and backward calls", h.log, sched)
	}
	if h.live != 0 || len(h.log) != 2*len(h.dead) {
		t.Errorf("%d units in use after the Run, %d calls for %d Needs", h.live, len(h.log), len(h.dead))
	}
	t.Logf("%d units, %d hook calls, at most %d units in use at once; loss %v", len(units), len(h.log), h.maxLive, lu)
}
