package benchutil

import "testing"

// Op charges a stack to its outermost op, or to what its frames say it is; Kernel to its
// innermost recognised work.
func TestOpKernel(t *testing.T) {
	cases := []struct {
		name       string
		frames     []string
		op, kernel string
	}{
		{"conv forward through a SIMD kernel",
			[]string{"runtime.cgocall", "github.com/gorgonia-parallel/gp/internal/simd._Cfunc_gp5_conv_shift_fwd_pad", "github.com/gorgonia-parallel/gp/nn/ops.(*conv2dOp).Do", "gorgonia.org/gorgonia.(*execOp).exec", "gorgonia.org/gorgonia.(*tapeMachine).runall"},
			"ops.conv2dOp", "simd conv_shift_fwd_pad"},
		{"an op inside an op is charged to the outer one",
			[]string{"github.com/gorgonia-parallel/gp/internal/simd.GemmRows32", "github.com/gorgonia-parallel/gp/nn/ops.(*linearOp).Do", "github.com/gorgonia-parallel/gp/models/swin.(*attnOp).Do"},
			"swin.attnOp", "GEMM"},
		{"the optimizer",
			[]string{"runtime.memmove", "github.com/gorgonia-parallel/gp/optim.(*SGD).Step"},
			"optimizer", "memory copy"},
		{"zeroing",
			[]string{"runtime.memclrNoHeapPointers", "github.com/gorgonia-parallel/gp/nn.(*Params).ZeroGrad"},
			"zeroing gradients", "memory clear"},
		{"the collector",
			[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"},
			"garbage collector", "allocation and GC"},
		{"anything else",
			[]string{"runtime.futex", "runtime.notesleep"},
			"other (runtime.futex)", "Go code"},
	}
	for _, c := range cases {
		s := Sample{Seconds: 0.01, Frames: c.frames}
		if got := s.Op(); got != c.op {
			t.Errorf("%s: Op() = %q, want %q", c.name, got, c.op)
		}
		if got := s.Kernel(); got != c.kernel {
			t.Errorf("%s: Kernel() = %q, want %q", c.name, got, c.kernel)
		}
	}
}
