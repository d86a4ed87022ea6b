package devzero_test

import (
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

// ZeRO-3 on the device (gathers ahead on the communicator's stream, reduce-scatters during
// backward, the optimizer on the shard, offloaded or not) with every stream asynchronous
// under each seed: results equal the CPU's and the checker finds no unordered access. The
// two-rank test comes first, so that the process's first launches come from two ranks at
// once: that is how a fake driver that loaded its kernel emulator without a lock was caught
// (a launch racing the load was counted and not run, the first step's gradient 0.584 off in
// about 1 run in 12; 0 in 30 runs since it loads under pthread_once).
func TestAsyncStreamsZeRO3(t *testing.T) {
	cudatest.RunAsync(t, cudatest.Test{Name: "match CPU", Run: TestTwoRanksMatchCPU},
		cudatest.Test{Name: "grad shard unscale and clip", Run: TestGradShardUnscaleAndClip},
		cudatest.Test{Name: "reduce-scatter during backward", Run: TestReduceScatterDuringBackward},
		cudatest.Test{Name: "gather ahead and free", Run: TestGatherAheadAndFree},
		cudatest.Test{Name: "gather failure frees blocks", Run: TestGatherFailureFreesBlocks})
}
