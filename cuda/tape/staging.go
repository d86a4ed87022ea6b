package tape

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda"
)

// Note [One synchronisation per Run]: a Run copies its leaves in and reads its loss and
// outputs (and BatchNorm's running statistics, Note [Running statistics on the device])
// through pinned buffers the program holds for its life, with asynchronous copies on the
// device's stream: the leaves are packed into staging.in and copied in without waiting;
// after the last op the loss, the outputs and the statistics are copied into staging.out
// (and the statistics' buffer), and one synchronisation waits for all of them. A pinned
// buffer is written by the host only when no copy of it can be queued: the Run's
// synchronisation has passed, or, after a Run that returned before it (an error, a
// cancelled context), the next Run synchronises first (Program.pending).

// staging is a program's pinned buffers: in holds every leaf, out the loss and the outputs.
type staging struct {
	in, out   *cuda.Pinned
	inOff     []int // by p.ins: the leaf's first float in in
	outOff    map[string]int
	lossOff   int
	nIn, nOut int
}

// allocStaging sizes the pinned buffers for the program's leaves, loss and outputs.
func (p *Program) allocStaging() error {
	s := &p.stage
	for _, in := range p.ins {
		s.inOff = append(s.inOff, s.nIn)
		s.nIn += p.fixed[in.slot].Len()
	}
	s.outOff = map[string]int{}
	if p.loss >= 0 {
		s.lossOff = s.nOut
		s.nOut++
	}
	for name, o := range p.outs {
		s.outOff[name] = s.nOut
		s.nOut += len(o.host)
	}
	var err error
	if s.nIn > 0 {
		if s.in, err = p.dev.Pinned(4 * s.nIn); err != nil {
			return fmt.Errorf("cuda/tape: pinned staging of the inputs (%d floats): %w", s.nIn, err)
		}
	}
	if s.nOut > 0 {
		if s.out, err = p.dev.Pinned(4 * s.nOut); err != nil {
			return fmt.Errorf("cuda/tape: pinned staging of the loss and outputs (%d floats): %w", s.nOut, err)
		}
	}
	return nil
}

// copyIn packs every leaf into the input staging and queues its copy to the device.
func (p *Program) copyIn() error {
	if p.stage.nIn == 0 {
		return nil
	}
	buf := p.stage.in.Float32s()
	for i, in := range p.ins {
		t := p.fixed[in.slot]
		dst := buf[p.stage.inOff[i] : p.stage.inOff[i]+t.Len()]
		switch v := in.node.Value().Data().(type) {
		case []float32:
			if len(v) != len(dst) {
				return fmt.Errorf("cuda/tape: leaf %s holds %d floats, want %d", in.node.Name(), len(v), len(dst))
			}
			copy(dst, v)
		case float32:
			if len(dst) != 1 {
				return fmt.Errorf("cuda/tape: leaf %s holds a scalar, want %d floats", in.node.Name(), len(dst))
			}
			dst[0] = v
		default:
			return fmt.Errorf("cuda/tape: leaf %s holds %T, want float32", in.node.Name(), in.node.Value().Data())
		}
		if err := p.dev.Context().CopyHtoDAsync(t.Ptr(), unsafe.Pointer(unsafe.SliceData(dst)), 4*len(dst), p.dev.Stream()); err != nil {
			return fmt.Errorf("cuda/tape: copying %s in: %w", in.node.Name(), err)
		}
	}
	return nil
}

// copyOut queues the loss and the outputs into the output staging, waits for the device
// once (the copies queued before it too: the running statistics'), and unpacks them.
func (p *Program) copyOut(ctx context.Context) error {
	s := &p.stage
	if s.nOut > 0 {
		buf := s.out.Float32s()
		if p.loss >= 0 {
			if err := p.readAsync(p.vals[p.loss], buf[s.lossOff:s.lossOff+1]); err != nil {
				return fmt.Errorf("cuda/tape: reading the loss: %w", err)
			}
		}
		for name, o := range p.outs {
			if err := p.readAsync(p.vals[o.slot], buf[s.outOff[name]:s.outOff[name]+len(o.host)]); err != nil {
				return fmt.Errorf("cuda/tape: reading output %s: %w", name, err)
			}
		}
	}
	if err := p.dev.Synchronize(ctx); err != nil {
		return fmt.Errorf("cuda/tape: end of the run: %w", err)
	}
	if s.nOut > 0 {
		buf := s.out.Float32s()
		if p.loss >= 0 {
			p.lossV = buf[s.lossOff]
		}
		for name, o := range p.outs {
			copy(o.host, buf[s.outOff[name]:])
		}
	}
	return nil
}

// readAsync queues the copy of the float32 tensor t into dst, pinned memory of t's size
// (a 16-bit value is cast to float32 on the device first, as Tensor.CopyTo does).
func (p *Program) readAsync(t *cuda.Tensor, dst []float32) error {
	if t == nil {
		return fmt.Errorf("no value")
	}
	if t.Len() != len(dst) {
		return fmt.Errorf("%v %v into %d float32", t.DType(), t.Shape(), len(dst))
	}
	if t.DType() != cuda.Float32 {
		f, err := p.dev.Alloc(cuda.Float32, t.Shape()...)
		if err != nil {
			return err
		}
		p.runOwned = append(p.runOwned, f) // read by the copy: freed after the Run
		if err := p.dev.Cast(f, t); err != nil {
			return err
		}
		t = f
	}
	return p.dev.Context().CopyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), t.Ptr(), 4*len(dst), p.dev.Stream())
}

// freeStaging returns the pinned buffers (Program.Close).
func (p *Program) freeStaging() {
	for _, b := range []*cuda.Pinned{p.stage.in, p.stage.out} {
		if b != nil {
			b.Free()
		}
	}
	p.stage.in, p.stage.out = nil, nil
}
