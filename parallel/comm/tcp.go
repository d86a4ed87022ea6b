package comm

import (
	"bufio"
	"context"
	"encoding/binary"

	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/auth"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

// NewTCPGroup connects rank to the other size-1 ranks over TCP, exchanging listening
// addresses through st, and returns the group. Every pair of ranks shares one control
// connection (point-to-point messages, aborts, leave notices) and WithStreams data
// connections. Connections are authenticated with the rendezvous secret. All ranks must pass
// the same options.
func NewTCPGroup(ctx context.Context, st *store.Store, rank, size int, opts ...Option) (Group, error) {
	cfg := newConfig(opts)
	t, err := dialTCP(ctx, st, rank, size, cfg)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	return newGroup(t, cfg), nil
}

const (
	ctrlMsg byte = iota + 1
	ctrlAbort
	ctrlBye
	ctrlAbortAck // "your abort notice arrived": the aborting rank may close at once
)

type tcpTransport struct {
	rank, size, k int
	logger        *slog.Logger
	ln            net.Listener
	ctrl          []*ctrlConn
	data          [][]*dataConn // [peer][stream]
	box           mailbox

	once     sync.Once
	abort    chan struct{}
	err      error
	onAbort  func(error) // run once by the first Abort with its error (shared memory wakes its waits)
	notified atomic.Bool // this rank sent abort notices: Close waits for acknowledgements

	readers sync.WaitGroup
}

type ctrlConn struct {
	c     net.Conn
	wmu   sync.Mutex
	gone  chan struct{} // closed on the peer's leave notice or when its connection ends
	acked chan struct{} // closed when the peer acknowledges this rank's abort notice
}

type dataConn struct {
	c    *net.TCPConn
	rd   *bufio.Reader
	whdr [headerSize]byte
	rhdr [headerSize]byte
	vec  [2][]byte
	view []byte // RecvView's buffer (tcpViewBytes), made on first use
}

type hello struct{ rank, size, idx int }

func dialTCP(ctx context.Context, st *store.Store, rank, size int, cfg config) (*tcpTransport, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
	defer cancel()
	k := cfg.streams
	secret := cfg.secretValue()
	gen, err := st.Add(ctx, "comm/gen/"+strconv.Itoa(rank), 1)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("comm/g%d/", gen)
	purpose := "gp-comm-v1/" + prefix

	host := st.LocalHost()
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	t := &tcpTransport{rank: rank, size: size, k: k, logger: cfg.logger, ln: ln, onAbort: cfg.onAbort,
		ctrl: make([]*ctrlConn, size), data: make([][]*dataConn, size), abort: make(chan struct{})}
	for p := range size {
		t.data[p] = make([]*dataConn, k)
	}
	fail := func(err error) (*tcpTransport, error) {
		ln.Close()
		t.closeConns()
		return nil, err
	}
	if err := st.Set(ctx, prefix+"addr/"+strconv.Itoa(rank), []byte(ln.Addr().String())); err != nil {
		return fail(err)
	}

	// Lower ranks accept, higher ranks dial.
	type accepted struct {
		c  *net.TCPConn
		h  hello
		ok bool
	}
	want := (size - 1 - rank) * (k + 1)
	got := make(chan accepted)
	acceptDone := make(chan struct{})
	// hctx ends the handshakes still running once the wanted connections arrived.
	hctx, endHandshakes := context.WithCancel(ctx)
	defer endHandshakes()
	// Each handshake runs on its own goroutine, so a client that connects and stalls (a
	// stranger on the port) holds up only itself until its deadline, not the peers after it.
	// The loop ends when the listener closes, after the wanted connections arrived.
	go func() {
		var hs sync.WaitGroup
		defer func() {
			hs.Wait()
			close(acceptDone)
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hs.Add(1)
			go func() {
				defer hs.Done()
				h, err := acceptPeer(hctx, c.(*net.TCPConn), secret, purpose, rank, size, k)
				if err != nil {
					t.logger.Warn("comm: refused a connection", "rank", rank, "remote", c.RemoteAddr().String(), "err", err)
					c.Close()
					return
				}
				select {
				case got <- accepted{c.(*net.TCPConn), h, true}:
				case <-hctx.Done():
					c.Close()
				}
			}()
		}
	}()
	for p := range rank {
		addr, err := st.Get(ctx, prefix+"addr/"+strconv.Itoa(p))
		if err != nil {
			return fail(fmt.Errorf("waiting for rank %d to publish its address (is it running?): %w", p, err))
		}
		for idx := 0; idx <= k; idx++ {
			c, err := dialPeer(ctx, string(addr), secret, purpose, hello{rank, size, idx})
			if err != nil {
				return fail(fmt.Errorf("connecting to rank %d at %s: %w", p, addr, err))
			}
			t.attach(p, idx, c)
		}
	}
	for n := 0; n < want; n++ {
		select {
		case a := <-got:
			t.attach(a.h.rank, a.h.idx, a.c)
		case <-ctx.Done():
			var missing []int
			for p := rank + 1; p < size; p++ {
				if t.ctrl[p] == nil || k > 0 && t.data[p][k-1] == nil {
					missing = append(missing, p)
				}
			}
			ln.Close()
			endHandshakes()
			<-acceptDone
			return fail(fmt.Errorf("ranks %v did not connect: %w", missing, ctxErr(ctx)))
		}
	}
	ln.Close()
	endHandshakes()
	<-acceptDone
	for p, c := range t.ctrl {
		if c != nil {
			t.readers.Add(1)
			go t.readCtrl(p, c)
		}
	}
	return t, nil
}

func (t *tcpTransport) attach(peer, idx int, c *net.TCPConn) {
	c.SetNoDelay(true)
	if idx == 0 {
		t.ctrl[peer] = &ctrlConn{c: c, gone: make(chan struct{}), acked: make(chan struct{})}
		return
	}
	t.data[peer][idx-1] = &dataConn{c: c, rd: bufio.NewReaderSize(c, 16<<10)}
}

func dialPeer(ctx context.Context, addr, secret, purpose string, h hello) (*net.TCPConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := nc.(*net.TCPConn)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := auth.Respond(c, secret, purpose); err != nil {
		c.Close()
		return nil, err
	}
	var b [12]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(h.rank))
	binary.LittleEndian.PutUint32(b[4:], uint32(h.size))
	binary.LittleEndian.PutUint32(b[8:], uint32(h.idx))
	if _, err := c.Write(b[:]); err != nil {
		c.Close()
		return nil, err
	}
	var ok [1]byte
	if _, err := io.ReadFull(c, ok[:]); err != nil || ok[0] != 1 {
		c.Close()
		return nil, fmt.Errorf("peer refused hello %+v", h)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// acceptPeer runs the acceptor's handshake (authentication, then the 12-byte hello) with a
// 30-second deadline that ctx's end cuts short.
func acceptPeer(ctx context.Context, c *net.TCPConn, secret, purpose string, rank, size, k int) (hello, error) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if err := auth.Challenge(c, secret, purpose); err != nil {
		return hello{}, err
	}
	var b [12]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return hello{}, err
	}
	h := hello{int(binary.LittleEndian.Uint32(b[0:])), int(binary.LittleEndian.Uint32(b[4:])), int(binary.LittleEndian.Uint32(b[8:]))}
	if h.size != size || h.rank <= rank || h.rank >= size || h.idx > k {
		c.Write([]byte{0})
		return h, fmt.Errorf("%w: hello %+v does not fit rank %d of %d with %d streams", ErrMismatch, h, rank, size, k)
	}
	_, err := c.Write([]byte{1})
	return h, err
}

func (t *tcpTransport) Rank() int    { return t.rank }
func (t *tcpTransport) Size() int    { return t.size }
func (t *tcpTransport) Streams() int { return t.k }

// ctrlSettle bounds how long a broken data connection waits for the peer's control
// connection to explain it (see ioErr).
const ctrlSettle = 500 * time.Millisecond

// ioErr turns a data connection's error into the transport's abort error, or a
// PeerGoneError naming peer. The control connection is the authority on why a peer's
// connections end: a peer that aborts sends its notice there before it closes anything, and
// a dead peer's control connection ends too. So ioErr first lets the control reader catch up
// (until it ends, the transport aborts, or ctrlSettle passes): the error then names the
// peer's own reason rather than a bare reset.
func (t *tcpTransport) ioErr(peer int, err error) error {
	if c := t.ctrl[peer]; c != nil {
		timer := time.NewTimer(ctrlSettle)
		select {
		case <-t.abort:
		case <-c.gone:
		case <-timer.C:
		}
		timer.Stop()
	}
	select {
	case <-t.abort:
		return t.err
	default:
	}
	return &PeerGoneError{Rank: peer, Cause: err}
}

func (t *tcpTransport) Send(peer, s int, h *Header, b []byte) error {
	d := t.data[peer][s]
	hh := *h
	hh.Len = uint32(len(b))
	hh.put(d.whdr[:])
	d.vec[0], d.vec[1] = d.whdr[:], b
	bufs := net.Buffers(d.vec[:])
	if _, err := bufs.WriteTo(d.c); err != nil {
		return t.ioErr(peer, err)
	}
	return nil
}

func (t *tcpTransport) Recv(peer, s int, h *Header, b []byte) error {
	d := t.data[peer][s]
	if _, err := io.ReadFull(d.rd, d.rhdr[:]); err != nil {
		return t.ioErr(peer, err)
	}
	if err := h.get(d.rhdr[:]); err != nil {
		return err
	}
	if int(h.Len) != len(b) {
		return fmt.Errorf("%w: frame of %d bytes, buffer of %d", ErrMismatch, h.Len, len(b))
	}
	if _, err := io.ReadFull(d.rd, b); err != nil {
		return t.ioErr(peer, err)
	}
	return nil
}

// tcpViewBytes bounds the pieces RecvView hands on: small enough to stay in the core's
// cache between the kernel's copy and the reduction that reads it.
var tcpViewBytes = 256 << 10

// RecvView receives a frame of n payload bytes like Recv, calls check on its header before
// reading any payload, then hands the payload to fn as it arrives: each read takes what the
// socket holds (at most tcpViewBytes) and fn gets its whole 8-byte words (so whole elements
// of every type; the frame's last piece is whole because n is a multiple of the element
// size), the rest waiting for the next read. A reduction thus reads the bytes while they are
// still in cache, with as many reads as Recv makes (see viewRecver).
func (t *tcpTransport) RecvView(peer, s int, h *Header, n int, check func(*Header) error, fn func(off int, p []byte)) error {
	d := t.data[peer][s]
	if _, err := io.ReadFull(d.rd, d.rhdr[:]); err != nil {
		return t.ioErr(peer, err)
	}
	if err := vetFrame(h, d.rhdr[:], n, check); err != nil {
		return err
	}
	if len(d.view) != tcpViewBytes {
		d.view = make([]byte, tcpViewBytes)
	}
	off, have := 0, 0 // fn has had [0, off); d.view[:have] holds the bytes after it
	for off < n {
		m, err := d.rd.Read(d.view[have:min(len(d.view), n-off)])
		if m == 0 && err != nil {
			return t.ioErr(peer, err)
		}
		have += m
		whole := have &^ 7
		if off+have == n {
			whole = have
		}
		if whole > 0 {
			fn(off, d.view[:whole])
			off += whole
			have = copy(d.view, d.view[whole:have])
		}
	}
	return nil
}

func (t *tcpTransport) writeCtrl(peer int, typ byte, tag int64, b []byte) error {
	c := t.ctrl[peer]
	var hdr [13]byte
	hdr[0] = typ
	binary.LittleEndian.PutUint64(hdr[1:], uint64(tag))
	binary.LittleEndian.PutUint32(hdr[9:], uint32(len(b)))
	c.wmu.Lock()
	defer c.wmu.Unlock()
	bufs := net.Buffers{hdr[:], b}
	_, err := bufs.WriteTo(c.c)
	return err
}

func (t *tcpTransport) SendMsg(ctx context.Context, peer int, tag int64, b []byte) error {
	select {
	case <-t.abort:
		return t.err
	case <-ctx.Done():
		return ctxErr(ctx)
	default:
	}
	if err := t.writeCtrl(peer, ctrlMsg, tag, b); err != nil {
		return t.ioErr(peer, err)
	}
	return nil
}

func (t *tcpTransport) RecvMsg(ctx context.Context, peer int, tag int64, b []byte) error {
	return t.box.take(ctx, peer, tag, b, t.abort, func() error { return t.err })
}

// readCtrl reads the control connection of peer until it ends; an end without a leave
// notice means the peer's process is gone, which aborts the transport naming it.
func (t *tcpTransport) readCtrl(peer int, c *ctrlConn) {
	defer t.readers.Done()
	defer close(c.gone)
	rd := bufio.NewReader(c.c)
	for {
		var hdr [13]byte
		if _, err := io.ReadFull(rd, hdr[:]); err != nil {
			t.Abort(&PeerGoneError{Rank: peer, Cause: err}, false)
			return
		}
		typ, tag := hdr[0], int64(binary.LittleEndian.Uint64(hdr[1:]))
		msg := make([]byte, binary.LittleEndian.Uint32(hdr[9:]))
		if _, err := io.ReadFull(rd, msg); err != nil {
			t.Abort(&PeerGoneError{Rank: peer, Cause: err}, false)
			return
		}
		switch typ {
		case ctrlMsg:
			select {
			case t.box.box(peer, tag) <- msg:
			case <-t.abort:
			}
		case ctrlAbort:
			t.Abort(peerAbortError(peer, msg), false)
			c.c.SetWriteDeadline(time.Now().Add(time.Second))
			t.writeCtrl(peer, ctrlAbortAck, 0, nil)
		case ctrlAbortAck:
			select {
			case <-c.acked:
			default:
				close(c.acked)
			}
		case ctrlBye:
			return
		}
	}
}

func (t *tcpTransport) Abort(err error, notify bool) {
	first := false
	t.once.Do(func() {
		t.err = err
		close(t.abort)
		first = true
	})
	if !first {
		return
	}
	if t.onAbort != nil {
		t.onAbort(err)
	}
	past := time.Unix(1, 0)
	for _, ds := range t.data {
		for _, d := range ds {
			if d != nil {
				d.c.SetDeadline(past)
			}
		}
	}
	if notify {
		t.notified.Store(true)
		msg := abortNotice(err)
		for p, c := range t.ctrl {
			if c != nil {
				c.c.SetWriteDeadline(time.Now().Add(time.Second))
				t.writeCtrl(p, ctrlAbort, 0, msg)
			}
		}
	}
}

// Close sends a leave notice (ctrlBye) to every peer, waits (bounded by ctx; the group bounds
// it by WithCloseTimeout) for theirs, then closes the connections. A peer that is still in a
// collective learns that this rank left from the group's own leave notice, sent first (see
// group.sendLeave), so the wait is short whenever the peers are alive. After the group failed
// (this rank aborted, or a peer's abort notice arrived) it waits at most abortAckWait in all:
// a peer whose silence failed the group would otherwise hold every rank's exit for the whole
// close timeout.
func (t *tcpTransport) Close(ctx context.Context) error {
	for p, c := range t.ctrl {
		if c != nil {
			c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			t.writeCtrl(p, ctrlBye, 0, nil)
		}
	}
	notified := t.notified.Load()
	failed := notified
	select {
	case <-t.abort:
		failed = true // aborted by this rank's failure or by a peer's notice
	default:
	}
	var ackWait <-chan time.Time
	if failed {
		// The group failed, and the abort notices went out with a one-second write deadline:
		// a peer that has neither read this rank's notice nor left within that second is gone
		// or unreachable (the failure was often its silence), so waiting out
		// WithCloseTimeout for it only delays the exit.
		tm := time.NewTimer(abortAckWait)
		defer tm.Stop()
		ackWait = tm.C
	}
	for _, c := range t.ctrl {
		if c != nil {
			var acked <-chan struct{}
			if notified {
				acked = c.acked // the peer has read this rank's abort notice: nothing to wait for
			}
			select {
			case <-c.gone:
			case <-acked:
			case <-ackWait:
				ackWait = closedTime // the bound is for all peers together
			case <-ctx.Done():
			}
		}
	}
	// Leaving is not a failure: later operations fail with ErrClosed rather than PeerGone.
	t.once.Do(func() {
		t.err = ErrClosed
		close(t.abort)
	})
	t.closeConns()
	t.readers.Wait()
	return nil
}

// abortAckWait bounds how long Close waits, after the group failed, for the peers' leave
// notices or acknowledgements (the abort notice's own write deadline).
const abortAckWait = time.Second

// closedTime is a channel that is always ready.
var closedTime = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

func (t *tcpTransport) closeConns() {
	for _, c := range t.ctrl {
		if c != nil {
			c.c.Close()
		}
	}
	for _, ds := range t.data {
		for _, d := range ds {
			if d != nil {
				d.c.Close()
			}
		}
	}
}
