package devdp

import (
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/parallel/dp"
)

// Open opens the CUDA devices of a device list in package dp's vocabulary (dp.GPUs(0, 1):
// PyTorch's device_ids, the first the master), for NewBackend. Every device must be a GPU,
// listed once; opts are passed to every cuda.Open. On error the devices opened so far are
// closed and the error names the device that failed. The caller closes the devices after the
// DataParallel.
func Open(devs []dp.Device, opts ...cuda.Option) ([]*cuda.Device, error) {
	if len(devs) == 0 {
		return nil, errors.New("devdp: empty device list")
	}
	seen := map[int]bool{}
	for i, d := range devs {
		if d.Kind != dp.GPU {
			return nil, fmt.Errorf("devdp: replica %d on %s: %w (devdp runs replicas on CUDA devices; package dp runs them on CPUs)", i, d, dp.ErrDeviceUnsupported)
		}
		if seen[d.Index] {
			return nil, fmt.Errorf("devdp: device %s listed twice", d)
		}
		seen[d.Index] = true
	}
	out := make([]*cuda.Device, 0, len(devs))
	for i, d := range devs {
		cd, err := cuda.Open(d.Index, opts...)
		if err != nil {
			for _, o := range out {
				_ = o.Close()
			}
			return nil, fmt.Errorf("devdp: replica %d on %s: %w", i, d, err)
		}
		out = append(out, cd)
	}
	return out, nil
}
