package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/auth"
)

// Store is a client of the key-value store that rank 0 hosts (the role of torch's TCPStore).
// Ranks exchange addresses through it; other backends (NCCL's unique id) may use it too. Its
// methods are safe for concurrent use; they are serialized on one connection.
type Store struct {
	addr    string
	secret  string
	timeout time.Duration
	server  *Server // set on the rank that hosts the store (Rendezvous)

	mu   sync.Mutex
	conn net.Conn
	rd   *bufio.Reader
}

const (
	opSet byte = iota + 1
	opGet
	opAdd
	opJoin
)

const (
	stOK byte = iota
	stErr
	stTimeout
)

// purpose is the store's purpose in the authentication handshake (see package auth).
const purpose = "gp-store-v1"

// MaxValue bounds a value (and a reply) the store accepts: the store carries addresses,
// ids and counters, and a stranger on the port (any client when no secret is set) must not be
// able to make the server allocate what a length field claims.
const MaxValue = 64 << 20

// readLen reads n bytes, n at most limit, with memory growing as the bytes arrive (in 64 KiB
// steps) rather than with what the length field claims.
func readLen(r io.Reader, n uint64, limit int, what string) ([]byte, error) {
	if n > uint64(limit) {
		return nil, fmt.Errorf("%s of %d bytes is over the limit of %d", what, n, limit)
	}
	const step = 64 << 10
	if n <= step {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var buf bytes.Buffer
	got, err := io.Copy(&buf, io.LimitReader(r, int64(n)))
	if err == nil && uint64(got) != n {
		err = io.ErrUnexpectedEOF
	}
	return buf.Bytes(), err
}

// Dial connects to the store at addr (host:port), retrying until ctx ends (the host may not
// be up yet); a server that refuses this process's secret ends the retries at once with an
// error wrapping auth.ErrFailed. Options: WithSecret, WithTimeout (the default wait of Get).
func Dial(ctx context.Context, addr string, opts ...Option) (*Store, error) {
	cfg := newConfig(opts)
	s := &Store{addr: addr, secret: cfg.secretValue(), timeout: cfg.timeout}
	var last error
	for {
		err := s.connect(ctx)
		if err == nil {
			return s, nil
		}
		if errors.Is(err, auth.ErrFailed) {
			return nil, err
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot reach the store (master) at %s: %w (last error: %v)", addr, ctxErr(ctx), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Store) connect(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := auth.Respond(c, s.secret, purpose); err != nil {
		c.Close()
		return fmt.Errorf("store %s: %w", s.addr, err)
	}
	c.SetDeadline(time.Time{})
	s.conn, s.rd = c, bufio.NewReader(c)
	return nil
}

// Addr is the store's address.
func (s *Store) Addr() string { return s.addr }

// LocalHost returns the host of this client's end of its connection to the store: the
// address of the interface through which this process reaches the master, which is the one
// its peers can reach it through too. It is "" while the client is not connected (after a
// failed call, until the next one reconnects).
func (s *Store) LocalHost() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(s.conn.LocalAddr().String())
	if err != nil {
		return ""
	}
	return host
}

// Set stores value under key and wakes the Gets waiting for it.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	_, err := s.call(ctx, opSet, key, value)
	return err
}

// Get returns the value of key, waiting until some client sets it, ctx ends or the store's
// timeout passes (ErrTimeout).
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	wait := s.timeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	arg := binary.LittleEndian.AppendUint64(nil, uint64(max(wait, time.Millisecond)/time.Millisecond))
	return s.call(ctx, opGet, key, arg)
}

// Add adds delta to the integer stored under key (0 when unset) and returns the new value.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	v, err := s.call(ctx, opAdd, key, binary.LittleEndian.AppendUint64(nil, uint64(delta)))
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("store add %q: short reply", key)
	}
	return int64(binary.LittleEndian.Uint64(v)), nil
}

// join registers rank in a world of the given size; the store refuses duplicate ranks and a
// world size that differs from its own.
func (s *Store) join(ctx context.Context, rank, world int) error {
	arg := binary.LittleEndian.AppendUint32(nil, uint32(rank))
	arg = binary.LittleEndian.AppendUint32(arg, uint32(world))
	_, err := s.call(ctx, opJoin, "", arg)
	return err
}

// Close closes the connection, and on the hosting rank stops the server.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.conn != nil {
		err = s.conn.Close()
		s.conn = nil
	}
	if s.server != nil {
		err = errors.Join(err, s.server.Close())
	}
	return err
}

func (s *Store) call(ctx context.Context, op byte, key string, value []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		if err := s.connect(ctx); err != nil {
			return nil, fmt.Errorf("store %s: %w", s.addr, err)
		}
	}
	if len(value) > MaxValue {
		return nil, fmt.Errorf("store %s %q: value of %d bytes is over the limit of %d", s.addr, key, len(value), MaxValue)
	}
	c := s.conn
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	req := make([]byte, 0, 7+len(key)+len(value))
	req = append(req, op)
	req = binary.LittleEndian.AppendUint16(req, uint16(len(key)))
	req = append(req, key...)
	req = binary.LittleEndian.AppendUint32(req, uint32(len(value)))
	req = append(req, value...)
	var hdr [5]byte
	_, err := c.Write(req)
	if err == nil {
		_, err = io.ReadFull(s.rd, hdr[:])
	}
	var reply []byte
	if err == nil {
		reply, err = readLen(s.rd, uint64(binary.LittleEndian.Uint32(hdr[1:])), MaxValue, "reply")
	}
	if err != nil {
		// The connection is in an unknown state; the next call reconnects.
		c.Close()
		s.conn = nil
		if ctx.Err() != nil {
			return nil, fmt.Errorf("store %s %q: %w", s.addr, key, ctxErr(ctx))
		}
		return nil, fmt.Errorf("store %s %q: %w", s.addr, key, err)
	}
	switch hdr[0] {
	case stOK:
		return reply, nil
	case stTimeout:
		return nil, fmt.Errorf("store %s: %w waiting for key %q", s.addr, ErrTimeout, key)
	}
	return nil, fmt.Errorf("store %s: %s", s.addr, reply)
}

// Server hosts the store that Stores connect to. Rank 0 runs it during the rendezvous.
type Server struct {
	ln     net.Listener
	secret string
	world  int
	logger *slog.Logger

	mu      sync.Mutex
	data    map[string][]byte
	waiters map[string]chan struct{}
	joined  map[int]string
	conns   map[net.Conn]struct{}
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
}

// Listen starts a store server on addr (host:port; port 0 picks one) for a world of the given
// size (0 disables the rendezvous checks: any rank may join, any number of times). Clients
// must present the same secret. Options: WithSecret, WithLogger.
func Listen(addr string, world int, opts ...Option) (*Server, error) {
	cfg := newConfig(opts)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("hosting the store on %s: %w", addr, err)
	}
	s := &Server{ln: ln, secret: cfg.secretValue(), world: world, logger: cfg.logger,
		data: map[string][]byte{}, waiters: map[string]chan struct{}{}, joined: map[int]string{},
		conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server and drops its clients.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		close(s.done)
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if err := auth.Challenge(c, s.secret, purpose); err != nil {
				s.logger.Warn("store: refused a connection", "remote", c.RemoteAddr().String(), "err", err)
				return
			}
			c.SetDeadline(time.Time{})
			s.serve(c)
		}()
	}
}

func (s *Server) serve(c net.Conn) {
	rd := bufio.NewReader(c)
	for {
		var h [3]byte
		if _, err := io.ReadFull(rd, h[:]); err != nil {
			return
		}
		key, err := readLen(rd, uint64(binary.LittleEndian.Uint16(h[1:])), math.MaxUint16, "key")
		if err != nil {
			return
		}
		var vl [4]byte
		if _, err := io.ReadFull(rd, vl[:]); err != nil {
			return
		}
		val, err := readLen(rd, uint64(binary.LittleEndian.Uint32(vl[:])), MaxValue, "value")
		if err != nil {
			// Past a refused length the stream cannot be followed: answer, then hang up.
			s.logger.Warn("store: dropped a client", "remote", c.RemoteAddr().String(), "err", err)
			c.Write(append([]byte{stErr}, binary.LittleEndian.AppendUint32(nil, uint32(len(err.Error())))...))
			c.Write([]byte(err.Error()))
			return
		}
		st, reply := s.handle(h[0], string(key), val, c)
		out := append([]byte{st}, binary.LittleEndian.AppendUint32(nil, uint32(len(reply)))...)
		if _, err := c.Write(append(out, reply...)); err != nil {
			return
		}
	}
}

func (s *Server) handle(op byte, key string, val []byte, c net.Conn) (byte, []byte) {
	switch op {
	case opSet:
		s.mu.Lock()
		s.data[key] = val
		if w, ok := s.waiters[key]; ok {
			close(w)
			delete(s.waiters, key)
		}
		s.mu.Unlock()
		return stOK, nil
	case opGet:
		if len(val) != 8 {
			return stErr, []byte("bad get request")
		}
		timer := time.NewTimer(time.Duration(binary.LittleEndian.Uint64(val)) * time.Millisecond)
		defer timer.Stop()
		for {
			s.mu.Lock()
			v, ok := s.data[key]
			w := s.waiters[key]
			if !ok && w == nil {
				w = make(chan struct{})
				s.waiters[key] = w
			}
			s.mu.Unlock()
			if ok {
				return stOK, v
			}
			select {
			case <-w:
			case <-timer.C:
				return stTimeout, nil
			case <-s.done:
				return stErr, []byte("store closed")
			}
		}
	case opAdd:
		if len(val) != 8 {
			return stErr, []byte("bad add request")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		var cur int64
		if v, ok := s.data[key]; ok && len(v) == 8 {
			cur = int64(binary.LittleEndian.Uint64(v))
		}
		cur += int64(binary.LittleEndian.Uint64(val))
		nv := binary.LittleEndian.AppendUint64(nil, uint64(cur))
		s.data[key] = nv
		if w, ok := s.waiters[key]; ok {
			close(w)
			delete(s.waiters, key)
		}
		return stOK, nv
	case opJoin:
		if len(val) != 8 {
			return stErr, []byte("bad join request")
		}
		rank, world := int(binary.LittleEndian.Uint32(val)), int(binary.LittleEndian.Uint32(val[4:]))
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case s.world > 0 && world != s.world:
			return stErr, fmt.Appendf(nil, "rendezvous: rank %d (%s) has WORLD_SIZE=%d but the master (rank 0) has %d", rank, c.RemoteAddr(), world, s.world)
		case rank < 0 || (s.world > 0 && rank >= s.world):
			return stErr, fmt.Appendf(nil, "rendezvous: rank %d (%s) is outside the world of %d ranks", rank, c.RemoteAddr(), s.world)
		}
		if prev, ok := s.joined[rank]; ok {
			return stErr, fmt.Appendf(nil, "rendezvous: duplicate rank %d: already joined from %s, again from %s", rank, prev, c.RemoteAddr())
		}
		s.joined[rank] = c.RemoteAddr().String()
		return stOK, nil
	}
	return stErr, fmt.Appendf(nil, "unknown store op %d", op)
}
