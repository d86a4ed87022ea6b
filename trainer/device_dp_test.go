package trainer

import (
	"context"
	"io"
	"strings"
	"testing"
)

// -strategy dp -device cuda with more -dp-replicas than the process has devices fails before
// training, naming the replica and the device it lacks (the fake driver has two devices).
func TestDeviceDPMoreReplicasThanDevices(t *testing.T) {
	emulatorEnv(t, 2)

	cfg := tinyConfig(t, t.TempDir())
	cfg.Arch, cfg.Epochs, cfg.MaxSteps, cfg.Strategy, cfg.DPReplicas, cfg.Device = "resnet8", 1, 1, "dp", 3, "cuda"
	_, err := fitRun(context.Background(), cfg, io.Discard)
	if err == nil {
		t.Fatal("-strategy dp -dp-replicas 3 -device cuda trained on a process with 2 devices")
	}
	t.Log(err)
	for _, want := range []string{"replica 2", "device 2", "invalid device ordinal"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
