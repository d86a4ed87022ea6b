package store

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/auth"
	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
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
	srv, err := Listen("127.0.0.1:0", 0, WithSecret(fuzzSecret), WithLogger(quiet))
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
	if err := auth.Respond(c, fuzzSecret, purpose); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkStoreServes connects as a legitimate client and checks a Set, Get and Add.
func checkStoreServes(t testing.TB, addr string, v []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := Dial(ctx, addr, WithSecret(fuzzSecret))
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
		srv, err := Listen("127.0.0.1:0", 2, WithSecret(fuzzSecret), WithLogger(quiet))
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

// TestWrongSecretRefused: a client with another secret is refused at once, with
// auth.ErrFailed; one with the server's secret then connects.
func TestWrongSecretRefused(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", 2, WithSecret("right"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Dial(ctx, srv.Addr(), WithSecret("wrong"))
	if !errors.Is(err, auth.ErrFailed) {
		t.Fatalf("dial with wrong secret: %v, want auth.ErrFailed", err)
	}
	st, err := Dial(ctx, srv.Addr(), WithSecret("right"))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// TestRendezvousErrors: the server refuses a duplicate rank, a world size other than its own
// and a rank outside the world, naming each; an unreachable master is named too.
func TestRendezvousErrors(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", 3, WithSecret("s"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	dial := func() *Store {
		st, err := Dial(ctx, srv.Addr(), WithSecret("s"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	if err := dial().join(ctx, 1, 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rank, world int
		want        string
	}{
		{1, 3, "duplicate rank 1"},
		{2, 4, "WORLD_SIZE=4 but the master (rank 0) has 3"},
		{5, 3, "rank 5 (127.0.0.1"},
	} {
		err := dial().join(ctx, tc.rank, tc.world)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("join(%d, %d) = %v, want it to say %q", tc.rank, tc.world, err, tc.want)
		}
	}
	// Unreachable master: a port nobody listens on.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = Rendezvous(cctx, launchenv.Env{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 1})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the store (master) at 127.0.0.1:1") {
		t.Errorf("unreachable master: %v", err)
	}
}

// RecvView hands a frame's payload on in order, in pieces of at most tcpViewBytes that tile
// it exactly, and refuses a frame of another length before reading its payload.
