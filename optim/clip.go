package optim

import (
	"fmt"
	"math"
)

// GradNormSq is the sum of squares of every gradient in segs, accumulated in float64. In
// distributed training each rank computes it over its shard, the ranks all-reduce the sums,
// and each calls ClipGradNormSq with the total.
func GradNormSq(segs []Segment) float64 {
	var s float64
	for _, seg := range segs {
		for _, g := range seg.Grad {
			s += float64(g) * float64(g)
		}
	}
	return s
}

// ClipGradNorm is torch.nn.utils.clip_grad_norm_ with norm_type 2 over every gradient in
// segs: if the global norm exceeds maxNorm, the gradients are scaled by
// maxNorm/(norm+1e-6). It returns the norm before clipping (as float32, like PyTorch).
func ClipGradNorm(segs []Segment, maxNorm float64) (float64, error) {
	return ClipGradNormSq(segs, maxNorm, GradNormSq(segs))
}

// ClipGradNormSq is ClipGradNorm given the precomputed global sum of squares normSq (for
// example all-reduced across ranks). It returns the global norm.
func ClipGradNormSq(segs []Segment, maxNorm, normSq float64) (float64, error) {
	norm, coef, err := ClipCoef(maxNorm, normSq)
	if err != nil {
		return norm, err
	}
	if coef < 1 {
		for _, s := range segs {
			for i := range s.Grad {
				s.Grad[i] *= coef
			}
		}
	}
	return norm, nil
}

// ClipCoef is clip_grad_norm_'s rule given the global sum of squares normSq: the norm
// (rounded to float32, like PyTorch's) and the factor the gradients are multiplied by when
// it is below 1, maxNorm/(norm+1e-6) computed in float32 as PyTorch does (it clamps the
// factor at 1). A norm that is inf or NaN is an error, and the gradients must be left as
// they are. Every clipping, on the host or a device, takes the factor from here.
func ClipCoef(maxNorm, normSq float64) (norm float64, coef float32, err error) {
	total := float32(math.Sqrt(normSq))
	if math.IsNaN(float64(total)) || math.IsInf(float64(total), 0) {
		return float64(total), 1, fmt.Errorf("optim: clip grad norm: the total norm is %v", total)
	}
	return float64(total), float32(maxNorm) / (total + float32(1e-6)), nil
}
