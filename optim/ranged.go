package optim

import (
	"errors"
	"fmt"
	"unsafe"
)

// Ranged is implemented by the optimizers whose update is element-wise (SGD, Adam, AdamW):
// one step can then be applied in pieces, each as soon as its gradients are final. DDP uses
// it to update each bucket's parameters while later buckets are still being reduced.
//
// BeginStep starts a step; StepGrads updates the elements whose gradients lie in grad, a
// sub-slice of the memory the segments' Grad views (nn.ParamSet.Grad); EndStep ends the
// step. Pieces that are disjoint and together cover every segment give the same bits as
// Step, in any order. Parts of grad that no segment views are skipped (parameters the
// optimizer does not own).
type Ranged interface {
	Optimizer
	GradsWithin(buf []float32) bool
	BeginStep() error
	StepGrads(grad []float32) error
	EndStep() error
}

// GradsWithin reports whether every segment's gradient lies in buf: pieces of buf then
// reach every element the optimizer updates.
func (b *base) GradsWithin(buf []float32) bool {
	blo, bhi := span(buf)
	for _, s := range b.segs {
		if lo, hi := span(s.Grad); lo < hi && (lo < blo || hi > bhi) {
			return false
		}
	}
	return true
}

// span is the address range of x's elements (empty for an empty x).
func span(x []float32) (lo, hi uintptr) {
	if len(x) == 0 {
		return 0, 0
	}
	lo = uintptr(unsafe.Pointer(&x[0]))
	return lo, lo + uintptr(len(x))*unsafe.Sizeof(x[0])
}

// ErrStepState is returned by StepGrads and EndStep outside a step, and by BeginStep and
// Step inside one.
var ErrStepState = errors.New("optim: ranged step out of order")

// overlap calls fn(si, lo, hi) for every segment si whose gradient overlaps grad, with
// [lo, hi) the overlap in the segment's elements.
func (b *base) overlap(grad []float32, fn func(si, lo, hi int)) {
	const es = unsafe.Sizeof(float32(0))
	glo, ghi := span(grad)
	for si, s := range b.segs {
		slo, shi := span(s.Grad)
		if lo, hi := max(glo, slo), min(ghi, shi); lo < hi {
			fn(si, int((lo-slo)/es), int((hi-slo)/es))
		}
	}
}

// stepWhole is Step for a Ranged optimizer: r's BeginStep, update over every element of
// every segment (split across the workers once, see WithWorkers), r's EndStep.
func (b *base) stepWhole(r Ranged, update func(si, lo, hi int)) error {
	if err := r.BeginStep(); err != nil {
		return err
	}
	if b.wholePlan == nil {
		all := make([]chunk, len(b.segs))
		for si, s := range b.segs {
			all[si] = chunk{si, 0, len(s.Data)}
		}
		b.wholePlan = split(all, b.cfg.workers, b.cfg.minChunk)
	}
	run(b.wholePlan, update)
	return r.EndStep()
}

// stepGrads is StepGrads for an optimizer called name: update over the elements whose
// gradients lie in grad, inside a step, split across the workers as Step is.
func (b *base) stepGrads(name string, grad []float32, update func(si, lo, hi int)) error {
	if err := b.within(name, "StepGrads"); err != nil {
		return err
	}
	if b.cfg.workers <= 1 {
		b.overlap(grad, update)
		return nil
	}
	var chunks []chunk
	b.overlap(grad, func(si, lo, hi int) { chunks = append(chunks, chunk{si, lo, hi}) })
	run(split(chunks, b.cfg.workers, b.cfg.minChunk), update)
	return nil
}

// begin (at BeginStep) and within (at StepGrads and EndStep) guard the ranged step's order.
func (b *base) begin(name string) error {
	if b.inStep {
		return fmt.Errorf("%w: %s: BeginStep or Step before the previous ranged step's EndStep", ErrStepState, name)
	}
	b.inStep = true
	return nil
}

func (b *base) within(name, what string) error {
	if !b.inStep {
		return fmt.Errorf("%w: %s: %s without BeginStep", ErrStepState, name, what)
	}
	return nil
}

var (
	_ Ranged = (*SGD)(nil)
	_ Ranged = (*Adam)(nil)
)
