package comm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

const fuzzSecret = "fuzz-secret"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// FuzzTCPHandshake connects to rank 0's transport listener while a world of 2 forms, sends
// random bytes before authentication and keeps the connection open; rank 1 must still
// connect and an all-reduce between the two must give the sum.
func FuzzTCPHandshake(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 32))
	f.Add(append(make([]byte, 32), 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0))
	f.Add([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"))
	f.Fuzz(func(t *testing.T, wire []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		opts := []Option{WithSecret(fuzzSecret), WithLogger(quiet), WithStreams(1)}
		srv, err := store.Listen("127.0.0.1:0", 2, storeOptions(opts)...)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		gs := make([]Group, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := func(r int) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := store.Dial(ctx, srv.Addr(), storeOptions(opts)...)
				if err != nil {
					errs[r] = err
					return
				}
				if gs[r], errs[r] = NewTCPGroup(ctx, st, r, 2, opts...); errs[r] != nil {
					st.Close()
					return
				}
				g := gs[r].(*group)
				g.onClose = append(g.onClose, st.Close)
			}()
		}
		start(0)
		// The stranger learns rank 0's address as rank 1 would, then talks before rank 1 does.
		st, err := store.Dial(ctx, srv.Addr(), storeOptions(opts)...)
		if err != nil {
			t.Fatal(err)
		}
		addr, err := st.Get(ctx, "comm/g1/addr/0")
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", string(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(wire)
		start(1)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			closeAll(nonNil(gs))
			t.Fatalf("the world did not form beside the stranger: %v", err)
		}
		defer closeAll(gs)
		bufs := [][]float32{{1, 2}, {10, 20}}
		for r, err := range onAll(gs, func(g Group) error { return g.AllReduce(F32(bufs[g.Rank()]), Sum).Wait(ctx) }) {
			if err != nil {
				t.Fatalf("rank %d: all-reduce: %v", r, err)
			}
		}
		if bufs[0][0] != 11 || bufs[1][1] != 22 {
			t.Fatalf("all-reduce gave %v", bufs)
		}
	})
}

func nonNil(gs []Group) []Group {
	var out []Group
	for _, g := range gs {
		if g != nil {
			out = append(out, g)
		}
	}
	return out
}
