package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// NewLocalGroups returns n groups whose ranks are goroutines of this process, connected by an
// in-process transport: the backend of single-process DataParallel and of fast tests. Each
// group must be driven from its own goroutine, and each closed.
func NewLocalGroups(n int, opts ...Option) []Group {
	net := NewLocalNetwork(n, opts...)
	gs := make([]Group, n)
	for i := range gs {
		gs[i] = NewGroup(net.Transport(i), opts...)
	}
	return gs
}

// Fault is what a LocalNetwork's fault hook decides for one frame.
type Fault struct {
	// Drop discards the frame: the sender sees success, the receiver never gets it.
	Drop bool
	// Delay holds the frame this long before delivering it.
	Delay time.Duration
}

// FaultFunc decides the fate of the frame h sent from rank from to rank to on stream s.
type FaultFunc func(from, to, s int, h *Header) Fault

// LocalNetwork connects n in-process transports. It injects faults for tests: SetFaults drops
// or delays frames, Kill makes a rank vanish as if its process had died.
type LocalNetwork struct {
	n       int
	streams int
	pipes   []*pipe // [from][to][stream]
	ts      []*localTransport
	mu      sync.Mutex
	faults  FaultFunc
}

type pipe struct {
	ch  chan frame
	ack chan error
}

type frame struct {
	h Header
	b []byte
}

// NewLocalNetwork creates the network for n ranks. Only WithStreams among opts matters.
func NewLocalNetwork(n int, opts ...Option) *LocalNetwork {
	cfg := newConfig(opts)
	ln := &LocalNetwork{n: n, streams: cfg.streams}
	ln.pipes = make([]*pipe, n*n*cfg.streams)
	for i := range ln.pipes {
		ln.pipes[i] = &pipe{ch: make(chan frame), ack: make(chan error, 1)}
	}
	ln.ts = make([]*localTransport, n)
	for i := range ln.ts {
		ln.ts[i] = &localTransport{net: ln, rank: i, abort: make(chan struct{})}
	}
	return ln
}

// Transport returns rank's transport.
func (ln *LocalNetwork) Transport(rank int) Transport { return ln.ts[rank] }

// SetFaults installs a fault hook consulted for every frame (nil removes it).
func (ln *LocalNetwork) SetFaults(f FaultFunc) {
	ln.mu.Lock()
	ln.faults = f
	ln.mu.Unlock()
}

// Kill makes rank vanish: its own operations fail, and every other rank's transport fails
// with a PeerGoneError naming it, as the TCP transport does when a process dies.
func (ln *LocalNetwork) Kill(rank int) {
	ln.ts[rank].Abort(fmt.Errorf("rank %d killed by fault injection", rank), false)
	for i, t := range ln.ts {
		if i != rank {
			t.Abort(&PeerGoneError{Rank: rank, Cause: errors.New("killed by fault injection")}, false)
		}
	}
}

func (ln *LocalNetwork) pipe(from, to, s int) *pipe {
	return ln.pipes[(from*ln.n+to)*ln.streams+s]
}

type localTransport struct {
	net   *LocalNetwork
	rank  int
	box   mailbox
	once  sync.Once
	abort chan struct{}
	err   error
}

func (t *localTransport) Rank() int    { return t.rank }
func (t *localTransport) Size() int    { return t.net.n }
func (t *localTransport) Streams() int { return t.net.streams }

func (t *localTransport) abortErr() error { return t.err }

func (t *localTransport) Send(peer, s int, h *Header, b []byte) error {
	hh := *h
	hh.Len = uint32(len(b))
	h = &hh
	t.net.mu.Lock()
	f := t.net.faults
	t.net.mu.Unlock()
	if f != nil {
		fault := f(t.rank, peer, s, h)
		if fault.Drop {
			return nil
		}
		if fault.Delay > 0 {
			select {
			case <-time.After(fault.Delay):
			case <-t.abort:
				return t.err
			}
		}
	}
	p := t.net.pipe(t.rank, peer, s)
	select {
	case p.ch <- frame{*h, b}:
	case <-t.abort:
		return t.err
	}
	// The receiver copies out of b before it acknowledges, whatever happens, so wait.
	return <-p.ack
}

func (t *localTransport) Recv(peer, s int, h *Header, b []byte) error {
	p := t.net.pipe(peer, t.rank, s)
	var f frame
	select {
	case f = <-p.ch:
	case <-t.abort:
		return t.err
	}
	*h = f.h
	if int(f.h.Len) != len(b) {
		p.ack <- fmt.Errorf("%w: rank %d expected %d bytes", ErrMismatch, t.rank, len(b))
		return fmt.Errorf("%w: frame of %d bytes, buffer of %d", ErrMismatch, f.h.Len, len(b))
	}
	copy(b, f.b)
	p.ack <- nil
	return nil
}

func (t *localTransport) SendMsg(ctx context.Context, peer int, tag int64, b []byte) error {
	select {
	case <-t.abort:
		return t.err
	default:
	}
	msg := append([]byte(nil), b...)
	select {
	case t.net.ts[peer].box.box(t.rank, tag) <- msg:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-t.abort:
		return t.err
	}
}

func (t *localTransport) RecvMsg(ctx context.Context, peer int, tag int64, b []byte) error {
	return t.box.take(ctx, peer, tag, b, t.abort, t.abortErr)
}

func (t *localTransport) Abort(err error, notify bool) {
	first := false
	t.once.Do(func() {
		t.err = err
		close(t.abort)
		first = true
	})
	if first && notify {
		for i, p := range t.net.ts {
			if i != t.rank {
				p.Abort(peerAbortError(t.rank, abortNotice(err)), false)
			}
		}
	}
}

func (t *localTransport) Close(context.Context) error {
	t.Abort(fmt.Errorf("rank %d: %w", t.rank, ErrClosed), false)
	return nil
}
