package main

import (
	"math"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// A trace is charged to its outermost op and its innermost recognised kernel; samples
// outside any op go to the optimizer or the collector by name.
func TestProfileRead(t *testing.T) {
	const traces = `File: benchmodels
Type: cpu
-----------+-------------------------------------------------------
      30ms   runtime.cgocall
             github.com/gorgonia-parallel/gp/internal/simd._Cfunc_gp5_sgemm_small
             github.com/gorgonia-parallel/gp/internal/simd.SmallGemm32
             github.com/gorgonia-parallel/gp/models/swin.attnForward[go.shape.float32]
             github.com/gorgonia-parallel/gp/models/swin.(*attnOp).Do
             gorgonia.org/gorgonia.(*tapeMachine).RunAll
             main.measure
-----------+-------------------------------------------------------
      10ms   runtime.cgocall
             github.com/gorgonia-parallel/gp/internal/simd._Cfunc_gp5_ln_fwd
             github.com/gorgonia-parallel/gp/internal/simd.LNForward
             github.com/gorgonia-parallel/gp/nn/ops.lnForward[go.shape.float32] (inline)
             github.com/gorgonia-parallel/gp/nn/ops.(*layerNormOp).Do
             main.measure
-----------+-------------------------------------------------------
      10ms   runtime.memmove
             github.com/gorgonia-parallel/gp/internal/simd.sgdMomentum
             main.sgdMomentum.func1
-----------+-------------------------------------------------------
`
	samples, err := benchutil.ReadTraces(traces)
	if err != nil {
		t.Fatal(err)
	}
	var p Profile
	p.charge(samples)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(p.Seconds, 0.05) {
		t.Errorf("profiled %v s, want 0.05", p.Seconds)
	}
	for k, want := range map[string]float64{"swin.attnOp": 0.6, "ops.layerNormOp": 0.2, "optimizer": 0.2} {
		if !near(p.ByOp[k], want) {
			t.Errorf("by op %q = %v, want %v (all: %v)", k, p.ByOp[k], want, p.ByOp)
		}
	}
	for k, want := range map[string]float64{"GEMM": 0.6, "simd ln_fwd": 0.2, "memory copy": 0.2} {
		if !near(p.ByKernel[k], want) {
			t.Errorf("by kernel %q = %v, want %v (all: %v)", k, p.ByKernel[k], want, p.ByKernel)
		}
	}
}
