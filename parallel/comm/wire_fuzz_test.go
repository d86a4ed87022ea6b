package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

const fuzzSecret = "fuzz-secret"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// storeFrame is a store request as Store.call writes it.
func storeFrame(op byte, key string, val []byte) []byte {
	b := append([]byte{op}, binary.LittleEndian.AppendUint16(nil, uint16(len(key)))...)
	b = append(b, key...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
	return append(b, val...)
}

// TestStoreRefusesHugeValue: a value length of 4 GiB from a client is refused before the
// server allocates it; the client gets the reason, and the server answers the next client.
func TestStoreRefusesHugeValue(t *testing.T) {
	srv, err := ListenStore("127.0.0.1:0", 0, WithSecret(fuzzSecret), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := dialAuthed(t, srv.Addr())
	defer c.Close()
	hdr := storeFrame(opSet, "k", nil)
	binary.LittleEndian.PutUint32(hdr[len(hdr)-4:], 0xffffffff)
	c.Write(hdr)
	reply, _ := io.ReadAll(c)
	if len(reply) < 5 || reply[0] != stErr || !strings.Contains(string(reply[5:]), "value of 4294967295 bytes is over the limit") {
		t.Errorf("reply %q, want the refusal", reply)
	}
	checkStoreServes(t, srv.Addr(), []byte("after"))
}

func dialAuthed(t testing.TB, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := authDial(c, fuzzSecret, storePurpose); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkStoreServes connects as a legitimate client and checks a Set, Get and Add.
func checkStoreServes(t testing.TB, addr string, v []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := DialStore(ctx, addr, WithSecret(fuzzSecret))
	if err != nil {
		t.Fatalf("the next client cannot connect: %v", err)
	}
	defer st.Close()
	if err := st.Set(ctx, "legit", v); err != nil {
		t.Fatalf("the next client's Set: %v", err)
	}
	got, err := st.Get(ctx, "legit")
	if err != nil || string(got) != string(v) {
		t.Fatalf("the next client's Get = %q, %v; want %q", got, err, v)
	}
	if n, err := st.Add(ctx, "legit-n", 2); err != nil || n != 2 {
		t.Fatalf("the next client's Add = %d, %v; want 2", n, err)
	}
}

// FuzzStoreServer sends random bytes to the store's server over a real 127.0.0.1 socket,
// before authentication (authed false) or as an authenticated client's requests, leaves that
// connection open, and checks the server still serves a legitimate client and then closes.
func FuzzStoreServer(f *testing.F) {
	f.Add(false, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add(false, make([]byte, 32))
	f.Add(true, storeFrame(opSet, "a", []byte("1")))
	f.Add(true, append(storeFrame(opGet, "a", binary.LittleEndian.AppendUint64(nil, 5)), storeFrame(opAdd, "n", make([]byte, 8))...))
	f.Add(true, storeFrame(opJoin, "", []byte{0, 0, 0, 0, 2, 0, 0, 0}))
	f.Add(true, storeFrame(opGet, "never", binary.LittleEndian.AppendUint64(nil, 1<<62)))
	f.Add(true, []byte{opSet, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, authed bool, wire []byte) {
		srv, err := ListenStore("127.0.0.1:0", 2, WithSecret(fuzzSecret), WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		var c net.Conn
		if authed {
			c = dialAuthed(t, srv.Addr())
		} else if c, err = net.Dial("tcp", srv.Addr()); err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(wire)
		checkStoreServes(t, srv.Addr(), wire[:min(len(wire), 16)])
		c.Close()
		closed := make(chan error, 1)
		go func() { closed <- srv.Close() }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not close within 10 s")
		}
	})
}

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
		srv, err := ListenStore("127.0.0.1:0", 2, opts...)
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
				st, err := DialStore(ctx, srv.Addr(), opts...)
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
		st, err := DialStore(ctx, srv.Addr(), opts...)
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
