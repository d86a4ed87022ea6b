package nccl_test

import (
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

// DDP with amp's sharded GradScaler on NCCL groups with every stream asynchronous under
// each seed: the same parameters as on comm's in-process groups, no unordered access.
func TestAsyncStreamsDDPAndScaler(t *testing.T) {
	cudatest.RunAsync(t, cudatest.Test{Name: "ddp and sharded scaler", Run: TestDDPAndShardedScalerOnNCCL})
}
