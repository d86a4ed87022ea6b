package cuda

import (
	"context"
	"fmt"
)

// CopyAcross copies src into dst, tensors of the same dtype and size on any devices of this
// process (DataParallel's parameter broadcast and gradient gather, cuda/devdp). It drains
// both devices' streams first and returns once the copy is done: the driver copies between
// devices under unified addressing (every 64-bit CUDA platform).
func CopyAcross(ctx context.Context, dst, src *Tensor) error {
	if dst == nil || src == nil || dst.dtype != src.dtype || dst.n != src.n {
		return fmt.Errorf("cuda: copy across devices: mismatched tensors")
	}
	if err := src.d.Synchronize(ctx); err != nil {
		return err
	}
	if dst.d != src.d {
		if err := dst.d.Synchronize(ctx); err != nil {
			return err
		}
	}
	if dst.n == 0 {
		return nil
	}
	if err := dst.d.ctx.CopyDtoD(dst.Ptr(), src.Ptr(), dst.n*dst.dtype.Size()); err != nil {
		return fmt.Errorf("cuda: copy from device %d to device %d: %w", src.d.ordinal, dst.d.ordinal, err)
	}
	// A device-to-device cuMemcpy does not wait on the host, and runs on the context's
	// default stream, which the device's non-blocking stream does not follow: wait for it.
	if err := dst.d.ctx.Synchronize(); err != nil {
		return fmt.Errorf("cuda: copy from device %d to device %d: %w", src.d.ordinal, dst.d.ordinal, err)
	}
	return nil
}
