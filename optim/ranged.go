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
	if len(buf) == 0 {
		for _, s := range b.segs {
			if len(s.Grad) > 0 {
				return false
			}
		}
		return true
	}
	const es = unsafe.Sizeof(float32(0))
	blo := uintptr(unsafe.Pointer(&buf[0]))
	bhi := blo + uintptr(len(buf))*es
	for _, s := range b.segs {
		if len(s.Grad) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(&s.Grad[0]))
		if lo < blo || lo+uintptr(len(s.Grad))*es > bhi {
			return false
		}
	}
	return true
}

// ErrStepState is returned by StepGrads and EndStep outside a step, and by BeginStep and
// Step inside one.
var ErrStepState = errors.New("optim: ranged step out of order")

// overlap calls fn(si, lo, hi) for every segment si whose gradient overlaps grad, with
// [lo, hi) the overlap in the segment's elements.
func (b *base) overlap(grad []float32, fn func(si, lo, hi int)) {
	if len(grad) == 0 {
		return
	}
	const es = unsafe.Sizeof(float32(0))
	glo := uintptr(unsafe.Pointer(&grad[0]))
	ghi := glo + uintptr(len(grad))*es
	for si, s := range b.segs {
		if len(s.Grad) == 0 {
			continue
		}
		slo := uintptr(unsafe.Pointer(&s.Grad[0]))
		shi := slo + uintptr(len(s.Grad))*es
		lo, hi := max(glo, slo), min(ghi, shi)
		if lo >= hi {
			continue
		}
		fn(si, int((lo-slo)/es), int((hi-slo)/es))
	}
}

// begin and end guard the ranged step's order.
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
