package nccl

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Device collectives are issued without waiting for the ones before (Note [Collectives in
// flight]): with the group's stream held (asynchronous fake streams), every one of a step's
// all-reduces is on the stream and none is done; released, each result is the sum over the
// ranks, and they complete in issue order. With one collective in flight the second would
// never be enqueued while the first cannot run.
func TestAsyncStreamsDeviceCollectivesInFlight(t *testing.T) {
	cudatest.RunAsync(t, cudatest.Test{Name: "all-reduces", Run: testAllReducesInFlight})
}

func testAllReducesInFlight(t *testing.T) {
	const world, count = 2, 33
	n := maxInFlight + 2 // more than the window: the worker retires the first to issue the last
	gs := groups(t, world)
	err := each(gs, func(r int, g *Group) error {
		c := g.Context()
		bufs := make([]driver.DevPtr, n)
		works := make([]DeviceWork, n)
		for b := range bufs {
			p, err := c.MemAlloc(4 * count)
			if err != nil {
				return err
			}
			defer c.MemFree(p)
			host := make([]float32, count)
			for i := range host {
				host[i] = val(r, i) + float32(b)
			}
			if err := c.CopyHtoD(p, unsafe.Pointer(&host[0]), 4*count); err != nil {
				return err
			}
			bufs[b] = p
		}
		if err := cudatest.HoldStream(uintptr(g.coll.stream), true); err != nil {
			return err
		}
		held := true
		defer func() {
			if held {
				_ = cudatest.HoldStream(uintptr(g.coll.stream), false)
			}
		}()
		for b, p := range bufs {
			works[b] = g.AllReduceDeviceAfter(p, count, libnccl.Float32, comm.Sum, 0, 0)
		}
		for b := range min(4, n) { // several: the worker's window, at least 4
			select {
			case <-works[b].Enqueued():
			case <-works[b].Done():
				return fmt.Errorf("rank %d: all-reduce %d done while the stream is held: %v", r, b, works[b].Wait(context.Background()))
			case <-time.After(10 * time.Second):
				return fmt.Errorf("rank %d: all-reduce %d of %d not enqueued while the stream runs nothing (one collective in flight?)", r, b, n)
			}
		}
		for b := range works {
			select {
			case <-works[b].Done():
				return fmt.Errorf("rank %d: all-reduce %d done while the stream is held", r, b)
			default:
			}
		}
		held = false
		if err := cudatest.HoldStream(uintptr(g.coll.stream), false); err != nil {
			return err
		}
		if err := wait(works[n-1]); err != nil {
			return err
		}
		for b := range works {
			select {
			case <-works[b].Done(): // retired in issue order: done before the last
			default:
				return fmt.Errorf("rank %d: all-reduce %d not done after the last, %d", r, b, n-1)
			}
			if err := works[b].Wait(context.Background()); err != nil {
				return err
			}
			got := make([]float32, count)
			if err := c.CopyDtoH(unsafe.Pointer(&got[0]), bufs[b], 4*count); err != nil {
				return err
			}
			want := make([]float32, count)
			for i := range want {
				for k := range world {
					want[i] += val(k, i) + float32(b)
				}
			}
			if err := same(fmt.Sprintf("rank %d: all-reduce %d", r, b), got, want); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
