package comm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

// tcpMaker builds a world of n TCP ranks inside this process over 127.0.0.1.
func tcpMaker(t testing.TB, n int, opts ...Option) []Group { return hostMaker(t, "tcp", n, opts...) }

// shmMaker builds a world of n ranks inside this process over the shared-memory transport
// (rings under /dev/shm, TCP control connections).
func shmMaker(t testing.TB, n int, opts ...Option) []Group { return hostMaker(t, "shm", n, opts...) }

// hostMakers are the transports between processes of one host; tests run on each. The race
// detector cannot see the synchronisation through shared memory's atomics (mmap memory has
// no shadow), so under -race only TCP runs in-process; the process tests still cover shm.
var hostMakers = func() []struct {
	name string
	mk   groupMaker
} {
	ms := []struct {
		name string
		mk   groupMaker
	}{{"tcp", tcpMaker}, {"shm", shmMaker}}
	if raceEnabled {
		return ms[:1]
	}
	return ms
}()

func hostMaker(t testing.TB, kind string, n int, opts ...Option) []Group {
	t.Helper()
	gs, err := hostWorld(kind, n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(gs) })
	return gs
}

// storeOptions are the options of a test's store that match the group options opts: the
// same secret and logger, as InitFromConfig gives its store.
func storeOptions(opts []Option) []store.Option {
	c := newConfig(opts)
	return []store.Option{store.WithSecret(c.secretValue()), store.WithLogger(c.logger)}
}

func hostWorld(kind string, n int, opts ...Option) ([]Group, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := store.Listen("127.0.0.1:0", n, storeOptions(opts)...)
	if err != nil {
		return nil, err
	}
	gs := make([]Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := store.Dial(ctx, srv.Addr(), storeOptions(opts)...)
			if err == nil {
				if kind == "shm" {
					gs[r], err = NewSHMGroup(ctx, st, r, n, opts...)
				} else {
					gs[r], err = NewTCPGroup(ctx, st, r, n, opts...)
				}
			}
			if err != nil {
				errs[r] = err
				return
			}
			g := gs[r].(*group)
			g.onClose = append(g.onClose, st.Close)
			if r == 0 {
				g.onClose = append(g.onClose, srv.Close)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		srv.Close()
		return nil, err
	}
	return gs, nil
}

func TestTCPCollectives(t *testing.T) {
	for _, tr := range hostMakers {
		for n := 1; n <= 5; n++ {
			t.Run(fmt.Sprint(tr.name, n), func(t *testing.T) {
				checkCollectives(t, tr.mk, n, WithChunkBytes(4096), WithSmallBytes(1024), WithStreams(2))
			})
		}
	}
	// A ring smaller than a chunk: frames wrap and are consumed while still being written.
	t.Run("shm-small-ring", func(t *testing.T) {
		if raceEnabled {
			t.Skip("the race detector cannot see shared memory's synchronisation")
		}
		checkCollectives(t, shmMaker, 3, WithChunkBytes(40000), WithSmallBytes(1024), WithStreams(1), WithSHMRingBytes(4096))
	})
}

func TestTCPDefaultsLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MB all-reduce")
	}
	// One 100 MB all-reduce at world 2 with the default algorithms: integer inputs make the
	// float32 sums exact, so the result is compared without tolerance.
	for _, tr := range hostMakers {
		t.Run(tr.name, func(t *testing.T) { checkLarge(t, tr.mk(t, 2)) })
	}
}

func checkLarge(t *testing.T, gs []Group) {
	const count = 25 << 20
	bufs := make([][]float32, 2)
	for r := range bufs {
		bufs[r] = make([]float32, count)
		for i := range bufs[r] {
			bufs[r][i] = float32((i*(r+1))%1000 - 500)
		}
	}
	noErrors(t, onAll(gs, func(g Group) error {
		return g.AllReduce(F32(bufs[g.Rank()]), Sum).Wait(context.Background())
	}))
	for r := range bufs {
		for i, v := range bufs[r] {
			if want := float32(i%1000-500) + float32((i*2)%1000-500); v != want {
				t.Fatalf("rank %d [%d] = %v, want %v", r, i, v, want)
			}
		}
	}
}

func TestTCPRecvView(t *testing.T) {
	gs := tcpMaker(t, 2, WithStreams(2))
	a, b := gs[0].(*group).t.(*tcpTransport), gs[1].(*group).t.(*tcpTransport)
	for _, tc := range []struct {
		name string
		n    int
	}{
		{"empty", 0},
		{"one element", 4},
		{"one piece", tcpViewBytes},
		{"piece and a bit", tcpViewBytes + 12},
		{"several pieces", 3*tcpViewBytes + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := make([]byte, tc.n)
			for i := range sent {
				sent[i] = byte(i*7 + 3)
			}
			h := Header{Kind: 1, DType: 2, Seq: 9, Count: uint64(tc.n / 4)}
			errc := make(chan error, 1)
			go func() { errc <- a.Send(1, 1, &h, sent) }()
			got := make([]byte, tc.n)
			next := 0
			var gh Header
			err := b.RecvView(0, 1, &gh, tc.n, func(hh *Header) error {
				if !hh.sameOp(&h) {
					return fmt.Errorf("header %v, want %v", hh, &h)
				}
				return nil
			}, func(off int, p []byte) {
				if off != next || len(p) > tcpViewBytes {
					t.Errorf("piece at %d of %d bytes, want offset %d and at most %d bytes", off, len(p), next, tcpViewBytes)
				}
				copy(got[off:], p)
				next = off + len(p)
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if next != tc.n || !bytes.Equal(got, sent) {
				t.Fatalf("received %d bytes (equal: %v), want the %d sent", next, bytes.Equal(got, sent), tc.n)
			}
		})
	}
	t.Run("wrong length", func(t *testing.T) {
		h := Header{Kind: 1, Seq: 10}
		errc := make(chan error, 1)
		go func() { errc <- a.Send(1, 0, &h, make([]byte, 8)) }()
		var gh Header
		called := false
		err := b.RecvView(0, 0, &gh, 16, nil, func(int, []byte) { called = true })
		if !errors.Is(err, ErrMismatch) || called {
			t.Fatalf("RecvView of 16 bytes from a frame of 8: err %v, payload handed on: %v; want ErrMismatch before the payload", err, called)
		}
		if gh.Len != 8 || gh.Seq != 10 {
			t.Fatalf("header %+v, want the sent one (Seq 10, Len 8)", gh)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})
}
