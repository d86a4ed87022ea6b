package optim

import (
	"fmt"
	"slices"

	"github.com/gorgonia-parallel/gp/nn"
)

// Segment is a contiguous run of parameter memory that an optimizer updates as one unit.
// Data and Grad have the same length; Data[i] is updated from Grad[i]. Parts, when set,
// say which parameter each range of the segment belongs to: the optimizer names its state
// after them, so state saved from one segmentation loads into another. A segment without
// Parts is saved under its own Name.
type Segment struct {
	// Name identifies the segment in errors, and in state dicts when Parts is empty.
	Name string
	// Data holds the values to update (a view into nn.ParamSet.Data, or a ZeRO shard).
	Data []float32
	// Grad holds the gradient of Data, same length.
	Grad []float32
	// WeightDecay is this segment's L2 penalty (Adam, SGD) or decoupled decay (AdamW).
	WeightDecay float64
	// Parts maps ranges of the segment to ranges of named parameters, in segment order.
	Parts []Part
}

// Part says that Segment.Data[SegOffset : SegOffset+Len] holds the flat (row-major)
// elements [ParamOffset, ParamOffset+Len) of the parameter Param, whose shape is Shape.
type Part struct {
	Param       string
	Shape       []int
	ParamOffset int
	SegOffset   int
	Len         int
}

// numel is the element count of the whole parameter.
func (p Part) numel() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// whole reports whether the part covers its whole parameter.
func (p Part) whole() bool { return p.ParamOffset == 0 && p.Len == p.numel() }

// SegmentOption configures Segments.
type SegmentOption func(*segConfig)

type segConfig struct {
	merge  bool
	ranged bool
	lo, hi int
	decay  func(p *nn.Param) float64
}

// Merged makes Segments return one segment per maximal run of adjacent parameters (in flat
// buffer order) with equal weight decay, instead of one per parameter: fewer, longer loops.
func Merged() SegmentOption { return func(c *segConfig) { c.merge = true } }

// InRange restricts the segments to the flat element range [lo, hi) of ParamSet.Data and
// ParamSet.Grad, cutting parameters at the range's ends: a ZeRO shard.
func InRange(lo, hi int) SegmentOption {
	return func(c *segConfig) { c.ranged, c.lo, c.hi = true, lo, hi }
}

// WithDecayFunc chooses each parameter's weight decay, replacing the default rule
// (weightDecay, or 0 for parameters marked NoWeightDecay).
func WithDecayFunc(f func(p *nn.Param) float64) SegmentOption {
	return func(c *segConfig) { c.decay = f }
}

// Segments splits the parameters of ps into segments, in flat-buffer order (the reverse of
// registration order). By default every parameter is one segment with weight decay
// weightDecay, except parameters with NoWeightDecay set, which get 0.
func Segments(ps *nn.ParamSet, weightDecay float64, opts ...SegmentOption) ([]Segment, error) {
	c := segConfig{lo: 0, hi: len(ps.Data)}
	for _, o := range opts {
		o(&c)
	}
	if c.decay == nil {
		c.decay = func(p *nn.Param) float64 {
			if p.NoWeightDecay {
				return 0
			}
			return weightDecay
		}
	}
	if c.lo < 0 || c.hi > len(ps.Data) || c.lo > c.hi {
		return nil, fmt.Errorf("optim: range [%d,%d) outside the flat buffer of %d elements", c.lo, c.hi, len(ps.Data))
	}
	params := slices.Clone(ps.Params)
	slices.SortFunc(params, func(a, b *nn.Param) int { return a.Offset - b.Offset })
	var segs []Segment
	for _, p := range params {
		lo, hi := max(p.Offset, c.lo), min(p.Offset+p.Numel(), c.hi)
		if lo >= hi {
			continue
		}
		wd := c.decay(p)
		part := Part{Param: p.Name, Shape: p.Shape, ParamOffset: lo - p.Offset, Len: hi - lo}
		if n := len(segs); c.merge && n > 0 && segs[n-1].WeightDecay == wd && segEnd(ps, segs[n-1]) == lo {
			s := &segs[n-1]
			part.SegOffset = len(s.Data)
			s.Parts = append(s.Parts, part)
			start := lo - len(s.Data)
			s.Data = ps.Data[start:hi:hi]
			s.Grad = ps.Grad[start:hi:hi]
			s.Name = segName(s.Parts)
			continue
		}
		segs = append(segs, Segment{
			Data: ps.Data[lo:hi:hi], Grad: ps.Grad[lo:hi:hi], WeightDecay: wd,
			Parts: []Part{part},
		})
		segs[len(segs)-1].Name = segName(segs[len(segs)-1].Parts)
	}
	return segs, nil
}

// segEnd is the flat offset one past the segment's last element.
func segEnd(ps *nn.ParamSet, s Segment) int {
	last := s.Parts[len(s.Parts)-1]
	return ps.Param(last.Param).Offset + last.ParamOffset + last.Len
}

func partName(p Part) string { return PartEntry(p.Param, p, nil).Name }

func segName(parts []Part) string {
	if len(parts) == 1 {
		return partName(parts[0])
	}
	return fmt.Sprintf("%s..%s", partName(parts[0]), partName(parts[len(parts)-1]))
}

func checkSegments(segs []Segment) error {
	for i, s := range segs {
		if len(s.Data) != len(s.Grad) {
			return fmt.Errorf("optim: segment %d %q: %d values but %d gradients", i, s.Name, len(s.Data), len(s.Grad))
		}
		end := 0
		for _, p := range s.Parts {
			if p.SegOffset != end || p.Len <= 0 || p.ParamOffset < 0 || p.ParamOffset+p.Len > p.numel() {
				return fmt.Errorf("optim: segment %d %q: part %s does not tile the segment", i, s.Name, partName(p))
			}
			end += p.Len
		}
		if len(s.Parts) > 0 && end != len(s.Data) {
			return fmt.Errorf("optim: segment %d %q: parts cover %d of %d elements", i, s.Name, end, len(s.Data))
		}
		if len(s.Parts) == 0 && s.Name == "" {
			return fmt.Errorf("optim: segment %d has neither parts nor a name", i)
		}
	}
	return nil
}
