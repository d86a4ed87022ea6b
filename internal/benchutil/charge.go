package benchutil

import (
	"regexp"
	"strings"
)

// opMethod matches an op's Do method in a frame: pkg.(*type).Do or pkg.type.Do.
var opMethod = regexp.MustCompile(`([\w-]+)\.\(?\*?(\w+)\)?\.Do$`)

// kernelRules name the innermost recognised work of a stack, tried on each frame from the
// leaf outwards, the first match winning.
var kernelRules = []struct{ name, substr string }{
	{"allocation and GC", "runtime.mallocgc"},
	{"allocation and GC", "runtime.gcBgMarkWorker"},
	{"allocation and GC", "runtime.gcDrain"},
	{"memory copy", "runtime.memmove"},
	{"memory clear", "runtime.memclr"},
	{"GEMM", "gemm"},
	{"GEMM", "Gemm"},
	{"im2col/col2im", "im2col"},
	{"im2col/col2im", "col2im"},
	{"im2col/col2im", "Im2col"},
	{"im2col/col2im", "Col2im"},
}

// simdKernel names a SIMD kernel by its cgo function (simd._Cfunc_gp5_ln_fwd → ln_fwd).
var simdKernel = regexp.MustCompile(`_Cfunc_gp\d*_(\w+)$`)

// Op names what the stack ran, for charging a training step's CPU time by op: the
// outermost op's Do method ("ops.conv2dOp"; the tape machine's own instructions are not
// ops), else "optimizer", "garbage collector" or "zeroing gradients" when a frame says so,
// else "other (leaf frame)".
func (s Sample) Op() string {
	for i := len(s.Frames) - 1; i >= 0; i-- {
		if m := opMethod.FindStringSubmatch(s.Frames[i]); m != nil && !strings.HasPrefix(m[2], "tape") {
			return m[1] + "." + m[2]
		}
	}
	for _, f := range s.Frames {
		switch {
		case strings.Contains(f, "sgdMomentum") || strings.Contains(f, "SGDMomentum") || strings.Contains(f, "/optim."):
			return "optimizer"
		case strings.Contains(f, "runtime.gcBgMarkWorker") || strings.Contains(f, "runtime.gcDrain"):
			return "garbage collector"
		case strings.Contains(f, "ZeroGrad"):
			return "zeroing gradients"
		}
	}
	if len(s.Frames) == 0 {
		return "other"
	}
	return "other (" + s.Frames[0] + ")"
}

// Kernel names the innermost recognised work on the stack: "GEMM", "im2col/col2im", a SIMD
// kernel ("simd ln_fwd"), "memory copy", "memory clear", "allocation and GC", else
// "Go code".
func (s Sample) Kernel() string {
	for _, f := range s.Frames {
		for _, r := range kernelRules {
			if strings.Contains(f, r.substr) {
				return r.name
			}
		}
		if m := simdKernel.FindStringSubmatch(f); m != nil {
			return "simd " + m[1]
		}
	}
	return "Go code"
}
