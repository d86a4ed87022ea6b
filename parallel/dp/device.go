package dp

import (
	"errors"
	"fmt"
)

// Kind is the type of a device.
type Kind int

const (
	// CPU is a CPU core: a replica is a goroutine whose graphs share the master's parameters.
	CPU Kind = iota
	// GPU is a CUDA device: replicas run there on cuda/devdp's backend (WithBackend), over
	// the devices of a device list (devdp.Open).
	GPU
)

// Device is where a replica runs. Replica i runs on the i-th device of the device list, and
// the first device is the master: it holds the parameters, the optimizer state and the
// gathered outputs (PyTorch's output_device, device_ids[0]).
type Device struct {
	Kind  Kind
	Index int
}

// String names the device as PyTorch does: "cpu:0", "cuda:1".
func (d Device) String() string {
	if d.Kind == GPU {
		return fmt.Sprintf("cuda:%d", d.Index)
	}
	return fmt.Sprintf("cpu:%d", d.Index)
}

// CPUs returns n CPU devices, cpu:0 to cpu:n-1.
func CPUs(n int) []Device {
	out := make([]Device, max(n, 0))
	for i := range out {
		out[i] = Device{Kind: CPU, Index: i}
	}
	return out
}

// GPUs returns the CUDA devices with the given ordinals: a device list for cuda/devdp
// (devdp.Open opens them for its backend; New without that backend refuses them).
func GPUs(ordinals ...int) []Device {
	out := make([]Device, len(ordinals))
	for i, o := range ordinals {
		out[i] = Device{Kind: GPU, Index: o}
	}
	return out
}

// ErrDeviceUnsupported is returned by New for a GPU device in WithDevices (the host backend
// runs CPUs; cuda/devdp's backend runs GPUs), and by devdp.Open for a CPU device.
var ErrDeviceUnsupported = errors.New("dp: device not supported")

// CheckDevices validates the device list of a backend whose replicas run on devices of kind
// k: not empty, every device of kind k (else an error wrapping ErrDeviceUnsupported), none
// listed twice. The error names the replica and its device.
func CheckDevices(devs []Device, k Kind) error {
	if len(devs) == 0 {
		return errors.New("empty device list")
	}
	seen := map[Device]bool{}
	for i, d := range devs {
		if d.Kind != k {
			want := "CPU"
			if k == GPU {
				want = "CUDA"
			}
			return fmt.Errorf("replica %d on %s: %w by a backend of %s devices", i, d, ErrDeviceUnsupported, want)
		}
		if seen[d] {
			return fmt.Errorf("device %s listed twice", d)
		}
		seen[d] = true
	}
	return nil
}
