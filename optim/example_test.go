package optim_test

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// Train a two-parameter model with AdamW, a linear warmup followed by cosine decay, and
// gradient clipping; biases are excluded from weight decay.
func Example() {
	ps, err := nn.NewParamSet(nil, []*nn.Param{
		{Name: "fc.weight", Shape: []int{2, 2}},
		{Name: "fc.bias", Shape: []int{2}, NoWeightDecay: true},
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	copy(ps.Param("fc.weight").Data, []float32{1, 2, 3, 4})
	segs, _ := optim.Segments(ps, 0.05, optim.Merged())
	opt, _ := optim.NewAdamW(segs, 0.1)
	warm, _ := optim.NewLinearLR(opt, 0.1, 1, 2)
	cos, _ := optim.NewCosineAnnealingLR(opt, 8, 0)
	sched, _ := optim.NewSequentialLR(opt, []optim.Scheduler{warm, cos}, []int{2})
	for step := 0; step < 4; step++ {
		// The gradient of 0.5*|w|² is w; a real model's backward pass fills ps.Grad.
		copy(ps.Grad, ps.Data)
		norm, _ := optim.ClipGradNorm(segs, 1.0)
		_ = opt.Step()
		sched.Step()
		fmt.Printf("step %d: grad norm %.3f, weight[0] %.4f, next lr %.4f\n", step, norm, ps.Param("fc.weight").Data[0], opt.LR())
	}
	for _, s := range segs {
		fmt.Println(s.Name, s.WeightDecay)
	}
	// Output:
	// step 0: grad norm 5.477, weight[0] 0.9895, next lr 0.0550
	// step 1: grad norm 5.456, weight[0] 0.9318, next lr 0.1000
	// step 2: grad norm 5.341, weight[0] 0.8273, next lr 0.0962
	// step 3: grad norm 5.133, weight[0] 0.7278, next lr 0.0854
	// fc.bias 0
	// fc.weight 0.05
}
