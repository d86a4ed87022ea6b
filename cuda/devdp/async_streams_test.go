package devdp_test

import (
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

// Data parallelism over two devices of one process (replicas' streams, peer copies of
// gradients and weights) with every stream asynchronous under each seed.
func TestAsyncStreamsDataParallel(t *testing.T) {
	cudatest.RunAsync(t, cudatest.Test{Name: "match CPU", Run: TestTwoDevicesMatchCPU},
		cudatest.Test{Name: "resnet matches CPU", Run: TestResNetTwoDevicesMatchCPUDataParallel},
		cudatest.Test{Name: "mlp two devices", Run: TestMLPTwoDevicesMatchOneDevice},
		cudatest.Test{Name: "matches host DataParallel", Run: TestDeviceMatchesHostDataParallel},
		cudatest.Test{Name: "replica failure", Run: TestReplicaFailureKeepsMasterGradients},
		cudatest.Test{Name: "kernel on another device", Run: TestKernelOnAnotherDevicesMemory})
}
