package main

import (
	"testing"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// Each stack goes to one phase: communication first (a gradient hook that launches a
// reduction is the all-reduce's), then the optimizer, zeroing, the taps, the tape machine.
func TestPhaseOf(t *testing.T) {
	for _, c := range []struct {
		frames []string
		want   string
	}{
		{[]string{"runtime.cgocall", "github.com/gorgonia-parallel/gp/parallel/comm.reduceN", "github.com/gorgonia-parallel/gp/parallel/comm.(*group).loop"}, "all-reduce"},
		{[]string{"github.com/gorgonia-parallel/gp/parallel/comm.(*group).launch", "github.com/gorgonia-parallel/gp/nn.(*Builder).use.(*Builder).gradFunc.func3", "gorgonia.org/gorgonia.(*tapeMachine).runall"}, "all-reduce"},
		{[]string{"github.com/gorgonia-parallel/gp/internal/simd.SGDMomentum", "github.com/gorgonia-parallel/gp/optim.sgdMomentum", "github.com/gorgonia-parallel/gp/parallel/ddp.(*DDP).finish"}, "optimizer"},
		{[]string{"runtime.memclrNoHeapPointers", "github.com/gorgonia-parallel/gp/parallel/ddp.(*hostBackend).ZeroGrad"}, "zeroing gradients"},
		{[]string{"github.com/gorgonia-parallel/gp/internal/simd.AddTo", "github.com/gorgonia-parallel/gp/nn.(*Builder).use.(*Builder).gradFunc.func3", "gorgonia.org/gorgonia.(*tapeMachine).runall"}, "gradient taps"},
		{[]string{"runtime.cgocall", "github.com/gorgonia-parallel/gp/nn/ops.(*conv2dOp).Do", "gorgonia.org/gorgonia.(*tapeMachine).runall"}, "forward and backward"},
		{[]string{"runtime.futex", "runtime.findRunnable"}, "other"},
	} {
		if got := phaseOf(benchutil.Sample{Seconds: 0.01, Frames: c.frames}); got != c.want {
			t.Errorf("phaseOf(%v) = %q, want %q", c.frames, got, c.want)
		}
	}
}

// opGrowth ranks the ops by how much their CPU grew from the lone process to the pair,
// counting an op seen on one side only against zero on the other.
func TestOpGrowth(t *testing.T) {
	var p phaseCPU
	p.ByOp.OnePlain = map[string]float64{"ops.conv2dOp": 25, "ops.bnOp": 1.25, "ops.linearOp": 0.5}
	p.ByOp.TwoPlain = map[string]float64{"ops.conv2dOp": 26, "ops.bnOp": 1, "ops.maxPoolOp": 2.5}
	const want = "ops.maxPoolOp +2.50, ops.conv2dOp +1.00, ops.bnOp -0.25"
	if got := p.opGrowth(3); got != want {
		t.Errorf("opGrowth(3) = %q, want %q", got, want)
	}
	if got := p.opGrowth(9); got != want+", ops.linearOp -0.50" {
		t.Errorf("opGrowth(9) = %q", got)
	}
}
