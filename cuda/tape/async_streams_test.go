package tape_test

import (
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

// The compiled programs (ops, a training step, the device optimizers' state, the amp
// scaler's unscale and the gradient clip, 16-bit products, BatchNorm's running statistics
// copied in and out without a wait) with the device's stream
// asynchronous under each seed: results equal the CPU's and the checker finds no op
// touching bytes another stream (or the host) may still be using.
func TestAsyncStreamsTape(t *testing.T) {
	cudatest.RunAsync(t, cudatest.Test{Name: "mlp", Run: TestMLPMatchesCPU},
		cudatest.Test{Name: "ops", Run: TestOpsMatchCPU},
		cudatest.Test{Name: "unscale grads", Run: TestUnscaleGradsMatchesScaler},
		cudatest.Test{Name: "clip grad norm", Run: TestClipGradNormMatchesHost},
		cudatest.Test{Name: "sum squares", Run: TestSumSquaresManyBlocks},
		cudatest.Test{Name: "state", Run: TestStateMatchesCPU},
		cudatest.Test{Name: "ranged step", Run: TestStateRangedStepIsStep},
		cudatest.Test{Name: "unit state", Run: TestUnitStateMatchesState},
		cudatest.Test{Name: "memory freed", Run: TestMemoryFreedAfterLastReader},
		cudatest.Test{Name: "autocast matmuls", Run: TestAutocastMatMulsMatchCPU},
		cudatest.Test{Name: "conv16", Run: TestConv16MatchesFloat32},
		cudatest.Test{Name: "running statistics", Run: TestRunningStatsFollowHost})
}
