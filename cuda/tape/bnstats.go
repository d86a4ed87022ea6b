package tape

import (
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn/ops"
)

// Note [Running statistics on the device]: BatchNorm's running mean and variance are the
// model's host buffers (nn/ops.BNState), which checkpoints, DDP's broadcast, the agreement
// check, the model EMA and the eval programs read, and which a restored checkpoint or a
// broadcast writes between Runs. A program keeps every BatchNorm's statistics in one
// device buffer for its life (runningStats), so that no layer waits for the host:
//
//   - At the start of a Run the host buffers are compared with shadow, the values the
//     device buffer holds (as last copied in or out). Only when they differ (the first Run,
//     a restored checkpoint, a broadcast, another program of the model ran) are they packed
//     into a pinned buffer and copied in, asynchronously, in one copy.
//   - The layers read and update their slices of the device buffer in stream order.
//   - After the last op, when a layer trained, the device buffer is copied into the pinned
//     buffer, again asynchronously, before the Run reads its loss and outputs: their
//     synchronisation (the Run's own, one for a program without loss or outputs) waits for
//     the copy too, and the trained layers' values are unpacked into the host buffers.
//
// So host and device never disagree between Runs (a host reader needs no sync point of its
// own, and a value written on the host between Runs is what the next Run uses), the step
// has no synchronisation per BatchNorm, and the values are bit-identical to a copy per
// layer. Each BatchNorm op has its own slots, initialised from the host at the Run's start
// and copied back in program order (the last op of a module applied twice wins), as num_
// batches_tracked is counted on the host, as the CPU op does.

// runningStats are the running statistics of a program's BatchNorms on the device.
type runningStats struct {
	layers  []*bnLayer
	n       int          // floats: each layer's mean then its variance
	dev     *cuda.Tensor // the device buffer, n floats
	pin     *cuda.Pinned // staging of the copies in and out
	shadow  []float32    // what dev holds when current
	current bool         // dev holds shadow (the last Run completed)
}

// bnLayer is one BatchNorm op's slots: elements [off, off+c) and [off+c, off+2c) of the
// device buffer.
type bnLayer struct {
	st       *ops.BNState
	off, c   int
	mean, vr *cuda.Tensor // views of the device buffer, from alloc on
	trained  bool         // updated by this Run: copied back at its end
}

// add reserves the slots of a BatchNorm over c channels whose host buffers are st's.
func (s *runningStats) add(st *ops.BNState, c int) *bnLayer {
	l := &bnLayer{st: st, off: s.n, c: c}
	s.layers = append(s.layers, l)
	s.n += 2 * c
	return l
}

// alloc makes the device and pinned buffers once every layer is added.
func (s *runningStats) alloc(dev *cuda.Device) error {
	if s.n == 0 {
		return nil
	}
	var err error
	if s.dev, err = dev.Alloc(cuda.Float32, s.n); err != nil {
		return fmt.Errorf("cuda/tape: BatchNorm running statistics (%d floats): %w", s.n, err)
	}
	if s.pin, err = dev.Pinned(4 * s.n); err != nil {
		return fmt.Errorf("cuda/tape: BatchNorm running statistics' pinned staging (%d floats): %w", s.n, err)
	}
	for _, l := range s.layers {
		if l.mean, err = s.dev.View(l.off, l.c); err != nil {
			return err
		}
		if l.vr, err = s.dev.View(l.off+l.c, l.c); err != nil {
			return err
		}
	}
	s.shadow = make([]float32, s.n)
	return nil
}

// begin starts a Run (no copy of the last Run may still use pin: Program.Run sees to it):
// the host's values are copied in when the device does not hold them.
func (s *runningStats) begin() error {
	if s.n == 0 {
		return nil
	}
	for _, l := range s.layers {
		l.trained = false
	}
	if s.current && !s.hostChanged() {
		s.current = false
		return nil
	}
	s.current = false
	buf := s.pin.Float32s()[:s.n]
	for _, l := range s.layers {
		copy(buf[l.off:l.off+l.c], l.st.RunningMean)
		copy(buf[l.off+l.c:l.off+2*l.c], l.st.RunningVar)
	}
	copy(s.shadow, buf)
	if err := s.pin.CopyTo(s.dev); err != nil {
		return fmt.Errorf("cuda/tape: BatchNorm running statistics to the device: %w", err)
	}
	return nil
}

// hostChanged reports whether a host buffer differs from the device's value, bit for bit.
func (s *runningStats) hostChanged() bool {
	for _, l := range s.layers {
		if len(l.st.RunningMean) != l.c || len(l.st.RunningVar) != l.c {
			return true
		}
		for i := range l.c {
			if math.Float32bits(l.st.RunningMean[i]) != math.Float32bits(s.shadow[l.off+i]) ||
				math.Float32bits(l.st.RunningVar[i]) != math.Float32bits(s.shadow[l.off+l.c+i]) {
				return true
			}
		}
	}
	return false
}

// enqueueOut queues the copy of the device buffer into pin when a layer trained, and
// reports whether it did; the Run's synchronisation that follows waits for it.
func (s *runningStats) enqueueOut() (bool, error) {
	trained := false
	for _, l := range s.layers {
		trained = trained || l.trained
	}
	if !trained {
		return false, nil
	}
	if err := s.pin.CopyFrom(s.dev); err != nil {
		return true, fmt.Errorf("cuda/tape: BatchNorm running statistics to the host: %w", err)
	}
	return true, nil
}

// finish ends a Run whose synchronisation has passed: the trained layers' values go to the
// host buffers, in program order.
func (s *runningStats) finish(copied bool) {
	if s.n == 0 {
		return
	}
	if copied {
		buf := s.pin.Float32s()[:s.n]
		copy(s.shadow, buf)
		for _, l := range s.layers {
			if l.trained {
				copy(l.st.RunningMean, buf[l.off:l.off+l.c])
				copy(l.st.RunningVar, buf[l.off+l.c:l.off+2*l.c])
			}
		}
	}
	s.current = true
}

// free returns the device and pinned buffers (Program.Close).
func (s *runningStats) free() {
	if s.pin != nil {
		s.pin.Free()
		s.pin = nil
	}
	s.dev.Free()
	s.dev = nil
	s.current = false
}
