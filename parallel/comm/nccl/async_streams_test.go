package nccl

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// The NCCL group's tests with every stream asynchronous under each seed: the collectives
// run on the workers' stream threads, the host copies wait for them, and the checker finds
// no unordered access. (Send/receive over processes is left out: its workers grow their
// staging buffers while another communicator of the rank may have a call in flight.)
func TestAsyncStreamsNCCL(t *testing.T) {
	cudatest.RunAsync(t, cudatest.Test{Name: "collectives", Run: TestCollectivesMatchReference},
		cudatest.Test{Name: "send recv", Run: TestSendRecvBesideCollectives},
		cudatest.Test{Name: "device all-gather reduce-scatter", Run: TestDeviceAllGatherReduceScatter},
		cudatest.Test{Name: "mismatched", Run: TestMismatchedCollectiveFails})
}

// The event protocol of a device all-reduce (the producer's stream records ready, the
// group's stream waits for it, reduces, records done, the consumer's stream waits for done)
// is what orders the buffer: with either wait removed the checker fails the unordered op,
// naming it, the op it races with and their streams.
func TestAsyncStreamsEventProtocol(t *testing.T) {
	const n = 64
	one := math.Float32bits(1)
	cases := []struct {
		name                string
		waitReady, waitDone bool
		want                []string // in the recorded race; none: no race, and the sum arrives
	}{
		{"both waits", true, true, nil},
		{"ready wait removed", false, true, []string{"ncclAllReduce (argument 0) on stream", "reads bytes",
			"cuMemsetD32Async on stream", "may still be writing them"}},
		{"done wait removed", true, false, []string{"cuMemcpyDtoDAsync on stream", "reads bytes",
			"ncclAllReduce (argument 1) on stream", "may still be writing them"}},
	}
	for _, seed := range cudatest.Seeds {
		for _, c := range cases {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, c.name), func(t *testing.T) {
				cudatest.Async(t, seed)
				gs := groups(t, 2)
				errs := make([]error, len(gs))
				err := each(gs, func(r int, g *Group) error {
					ctx := g.Context()
					if err := ctx.MakeCurrent(); err != nil {
						return err
					}
					buf, err := ctx.MemAlloc(4 * n)
					if err != nil {
						return err
					}
					defer ctx.MemFree(buf)
					out, err := ctx.MemAlloc(4 * n)
					if err != nil {
						return err
					}
					defer ctx.MemFree(out)
					s, err := ctx.StreamCreate()
					if err != nil {
						return err
					}
					defer ctx.StreamDestroy(s)
					var ready, done driver.Event
					for _, e := range []*driver.Event{&ready, &done} {
						if *e, err = ctx.EventCreate(false); err != nil {
							return err
						}
						defer ctx.EventDestroy(*e)
					}
					if err := ctx.MemsetD32Async(buf, one, n, s); err != nil {
						return err
					}
					if err := ctx.EventRecord(ready, s); err != nil {
						return err
					}
					wait := ready
					if !c.waitReady {
						wait = 0
					}
					// The group's stream is held until the consumer's copy is queued, so that
					// no host wait can have seen the all-reduce complete before it.
					held := uintptr(g.coll.stream)
					if err := cudatest.HoldStream(held, true); err != nil {
						return err
					}
					release := func() error { return cudatest.HoldStream(held, false) }
					w := g.AllReduceDeviceAfter(buf, n, libnccl.Float32, comm.Sum, wait, done)
					<-w.Enqueued()
					defer func() { errs[r] = w.Wait(t.Context()) }()
					if c.waitDone {
						if err := ctx.StreamWaitEvent(s, done); err != nil {
							return errors.Join(err, release())
						}
					}
					if err := ctx.CopyDtoDAsync(out, buf, 4*n, s); err != nil {
						return errors.Join(err, release())
					}
					if err := release(); err != nil {
						return err
					}
					if err := ctx.StreamSynchronize(s); err != nil {
						return err
					}
					got := make([]float32, n)
					if err := ctx.CopyDtoH(unsafe.Pointer(&got[0]), out, 4*n); err != nil {
						return err
					}
					for i, v := range got {
						if v != 2 {
							return fmt.Errorf("rank %d: element %d of the all-reduce is %v, want 2", r, i, v)
						}
					}
					return nil
				})
				race, rerr := cudatest.Race()
				if rerr != nil {
					t.Fatal(rerr)
				}
				if err := cudatest.ResetRace(); err != nil {
					t.Fatal(err)
				}
				if c.want == nil {
					if err := errors.Join(err, errors.Join(errs...)); err != nil || race != "" {
						t.Fatalf("ordered all-reduce: %v, race %q", err, race)
					}
					return
				}
				if err == nil && errors.Join(errs...) == nil {
					t.Error("the unordered op succeeded on every rank")
				}
				for _, w := range c.want {
					if !strings.Contains(race, w) {
						t.Errorf("want %q in the race, got %q", w, race)
					}
				}
			})
		}
	}
}
