package devddp_test

import (
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

// The two-rank DDP step over NCCL (gradients reduced on the communicator's stream after the
// compute stream's ready events, the compute stream waiting for each bucket's reduced event)
// with every stream asynchronous under each seed: results equal the CPU's and the checker
// finds no op touching a bucket another stream may still be using (the compression hooks'
// 16-bit buffer included), and the hooks run on pinned host copies see each bucket only
// after the device has written it.
func TestAsyncStreamsDDP(t *testing.T) {
	cudatest.RunAsync(t, cudatest.Test{Name: "match CPU", Run: TestTwoRanksMatchCPU},
		cudatest.Test{Name: "divergence and leaving rank", Run: TestDivergenceAndLeavingRankFail},
		cudatest.Test{Name: "match host", Run: TestDeviceMatchesHost})
}
