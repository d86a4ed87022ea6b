package nccl

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// The device all-gather and reduce-scatter (ZeRO-3's on the device) over 3 in-process ranks:
// rank r's count elements land at r·count of every rank's destination, and rank r receives
// elements [r·count, (r+1)·count) of the sum, with the done event recorded after them.
func TestDeviceAllGatherReduceScatter(t *testing.T) {
	const world, count = 3, 5
	gs := groups(t, world)
	err := each(gs, func(r int, g *Group) error {
		c := g.Context()
		alloc := func(n int) (driver.DevPtr, error) { return c.MemAlloc(4 * n) }
		src, err := alloc(count * world)
		if err != nil {
			return err
		}
		defer c.MemFree(src)
		dst, err := alloc(count * world)
		if err != nil {
			return err
		}
		defer c.MemFree(dst)
		done, err := c.EventCreate(false)
		if err != nil {
			return err
		}
		defer c.EventDestroy(done)
		host := make([]float32, count*world)
		for i := range host {
			host[i] = val(r, i)
		}
		if err := c.CopyHtoD(src, unsafe.Pointer(&host[0]), 4*len(host)); err != nil {
			return err
		}

		if err := wait(g.AllGatherDeviceAfter(dst, src, count, libnccl.Float32, 0, done)); err != nil {
			return err
		}
		if err := c.EventSynchronize(done); err != nil {
			return err
		}
		got := make([]float32, count*world)
		if err := c.CopyDtoH(unsafe.Pointer(&got[0]), dst, 4*len(got)); err != nil {
			return err
		}
		want := make([]float32, count*world)
		for k := range world {
			for i := range count {
				want[k*count+i] = val(k, i)
			}
		}
		if err := same(fmt.Sprintf("rank %d: device all-gather", r), got, want); err != nil {
			return err
		}

		if err := wait(g.ReduceScatterDeviceAfter(dst, src, count, libnccl.Float32, comm.Sum, 0, done)); err != nil {
			return err
		}
		got = got[:count]
		if err := c.CopyDtoH(unsafe.Pointer(&got[0]), dst, 4*count); err != nil {
			return err
		}
		want = want[:count]
		for i := range count {
			var s float32
			for k := range world {
				s += val(k, r*count+i)
			}
			want[i] = s
		}
		return same(fmt.Sprintf("rank %d: device reduce-scatter", r), got, want)
	})
	if err != nil {
		t.Fatal(err)
	}
}
