package devdp

import (
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
	if err := dp.CheckDevices(devs, dp.GPU); err != nil {
		return nil, fmt.Errorf("devdp: %w", err)
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
