package cuda

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// The fake-driver tests again with every stream asynchronous (its own thread, random
// delays) under each seed, the stream-order checker failing any op that touches bytes
// another stream may still be using.
func TestAsyncStreamsOps(t *testing.T) {
	cudatest.RunAsync(t, cudatest.Test{Name: "ops", Run: TestOpsOnFakeDriver},
		cudatest.Test{Name: "matmul", Run: TestMatMulOnFake}, cudatest.Test{Name: "cudnn", Run: TestConvCuDNNOnFake})
}

// Free of a pinned buffer whose copy to the device is still queued waits for the copy: the
// next Pinned hands out the same block, and the host's writes into it must not reach the
// first copy. The stream is held so that the copy is still pending when Free is called.
func TestAsyncStreamsPinnedFree(t *testing.T) {
	const n = 64
	for _, seed := range cudatest.Seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cudatest.Async(t, seed)
			d := open(t)
			z, err := d.Alloc(Float32, n)
			if err != nil {
				t.Fatal(err)
			}
			defer z.Free()
			p1, err := d.Pinned(4 * n)
			if err != nil {
				t.Fatal(err)
			}
			for i := range p1.Float32s() {
				p1.Float32s()[i] = 1
			}
			first := unsafe.Pointer(&p1.Bytes()[0])
			if err := cudatest.HoldStream(uintptr(d.Stream()), true); err != nil {
				t.Fatal(err)
			}
			held := true
			release := func() {
				if held {
					held = false
					if err := cudatest.HoldStream(uintptr(d.Stream()), false); err != nil {
						t.Error(err)
					}
				}
			}
			defer release()
			if err := p1.CopyTo(z); err != nil {
				t.Fatal(err)
			}
			next := make(chan *Pinned, 1)
			go func() {
				p1.Free()
				p2, err := d.Pinned(4 * n)
				if err != nil {
					next <- nil
					return
				}
				for i := range p2.Float32s() {
					p2.Float32s()[i] = 9
				}
				next <- p2
			}()
			select {
			case <-next:
				t.Fatal("Pinned.Free returned while the copy from the buffer was still queued")
			case <-time.After(20 * time.Millisecond): // the time a Free that does not wait needs to reach the send
			}
			release()
			p2 := <-next
			if p2 == nil {
				t.Fatal("second Pinned failed")
			}
			defer p2.Free()
			if unsafe.Pointer(&p2.Bytes()[0]) != first {
				t.Fatal("the pinned cache handed out another block: this test needs the freed one reused")
			}
			got, err := z.ToHost(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				if v != 1 {
					t.Fatalf("element %d copied from the freed buffer is %v, want 1 (the next owner's write reached the pending copy)", i, v)
				}
			}
		})
	}
}

// The checker fails an op that reads what another stream may still be writing: with the
// event wait (or the host's synchronisation) the copy is ordered after the kernel; with the
// wait removed it is an error naming both ops, both timelines and the buffer.
func TestAsyncStreamsCheckerCatchesRemovedWait(t *testing.T) {
	type scene struct {
		d      *Device
		other  driver.Stream
		ev     driver.Event
		y, z   *Tensor
		hostTo []float32
	}
	cases := []struct {
		name string
		run  func(s scene) error
		want []string // in the op's error and the recorded race; none: no race
	}{
		{"stream waits for the event", func(s scene) error {
			if err := s.d.ctx.StreamWaitEvent(s.other, s.ev); err != nil {
				return err
			}
			return s.d.ctx.CopyDtoDAsync(s.z.Ptr(), s.y.Ptr(), 4*s.y.Len(), s.other)
		}, nil},
		{"stream wait removed", func(s scene) error {
			return s.d.ctx.CopyDtoDAsync(s.z.Ptr(), s.y.Ptr(), 4*s.y.Len(), s.other)
		}, []string{"cuMemcpyDtoDAsync on stream", "reads bytes", "kernel fill_f32 (argument 0) on stream", "may still be writing them"}},
		{"host synchronises", func(s scene) error {
			if err := s.d.ctx.EventSynchronize(s.ev); err != nil {
				return err
			}
			return s.d.ctx.CopyDtoH(unsafe.Pointer(&s.hostTo[0]), s.y.Ptr(), 4*s.y.Len())
		}, nil},
		{"host synchronisation removed", func(s scene) error {
			return s.d.ctx.CopyDtoH(unsafe.Pointer(&s.hostTo[0]), s.y.Ptr(), 4*s.y.Len())
		}, []string{"cuMemcpyDtoH on the host reads bytes", "kernel fill_f32 (argument 0) on stream", "may still be writing them"}},
	}
	for _, seed := range cudatest.Seeds {
		for _, c := range cases {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, c.name), func(t *testing.T) {
				cudatest.Async(t, seed)
				d := open(t)
				s := scene{d: d, hostTo: make([]float32, 256)}
				var err error
				if s.other, err = d.ctx.StreamCreate(); err != nil {
					t.Fatal(err)
				}
				defer d.ctx.StreamDestroy(s.other)
				if s.ev, err = d.ctx.EventCreate(false); err != nil {
					t.Fatal(err)
				}
				defer d.ctx.EventDestroy(s.ev)
				if s.y, err = d.Alloc(Float32, 256); err != nil {
					t.Fatal(err)
				}
				defer s.y.Free()
				if s.z, err = d.Alloc(Float32, 256); err != nil {
					t.Fatal(err)
				}
				defer s.z.Free()
				if err := d.Fill(s.y, 3); err != nil {
					t.Fatal(err)
				}
				if err := d.ctx.EventRecord(s.ev, d.stream); err != nil {
					t.Fatal(err)
				}
				err = c.run(s)
				race, rerr := cudatest.Race()
				if rerr != nil {
					t.Fatal(rerr)
				}
				if err := cudatest.ResetRace(); err != nil {
					t.Fatal(err)
				}
				if c.want == nil {
					if err != nil || race != "" {
						t.Fatalf("ordered op: err %v, race %q", err, race)
					}
					return
				}
				if err == nil {
					t.Fatal("the unordered op succeeded")
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) || !strings.Contains(race, w) {
						t.Errorf("want %q in the error and the race:\nerror: %v\nrace:  %s", w, err, race)
					}
				}
				if err := d.ctx.StreamSynchronize(d.stream); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
