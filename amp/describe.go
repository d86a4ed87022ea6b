package amp

import G "gorgonia.org/gorgonia"

// OpDesc describes an op of this package for another executor of the same graph (cuda/tape,
// docs/DESIGN.md §9): Round to Format, or (Scaler not nil) the loss scaling by the
// scaler's current Scale, read at every run.
type OpDesc struct {
	Round  bool
	Format Format
	Scaler *GradScaler
}

// DescribeOp returns the description of an op of this package, and false for any other op.
func DescribeOp(op G.Op) (OpDesc, bool) {
	switch o := op.(type) {
	case *roundOp:
		return OpDesc{Round: true, Format: o.format}, true
	case *lossScaleOp:
		return OpDesc{Scaler: o.s}, true
	}
	return OpDesc{}, false
}
