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
	total := float32(math.Sqrt(normSq))
	if math.IsNaN(float64(total)) || math.IsInf(float64(total), 0) {
		return float64(total), fmt.Errorf("optim: clip grad norm: the total norm is %v", total)
	}
	// PyTorch computes the coefficient with float32 tensors and clamps it at 1.
	coef := float32(maxNorm) / (total + float32(1e-6))
	if coef < 1 {
		for _, s := range segs {
			for i := range s.Grad {
				s.Grad[i] *= coef
			}
		}
	}
	return float64(total), nil
}
