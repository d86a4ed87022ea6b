package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/auth"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

// Group is a process group: Size ranks that run the same collectives in the same order.
//
// Every operation is asynchronous: it is queued and returns a Work at once; collectives run
// one at a time in the order they were issued, and point-to-point Send/Recv run beside them.
// A buffer passed to an operation must not be touched until its Work has completed. Issue
// collectives from one goroutine (or otherwise in a fixed order): ranks match collectives by
// sequence number, and a different order is reported as ErrMismatch.
type Group interface {
	// Rank is this process's rank in [0, Size()).
	Rank() int
	// Size is the number of ranks (the world size).
	Size() int
	// AllReduce reduces buf element-wise over all ranks with op and leaves the result in buf on
	// every rank. buf has the same length on every rank.
	AllReduce(buf Buffer, op Op) Work
	// Broadcast copies root's buf into buf on every other rank.
	Broadcast(buf Buffer, root int) Work
	// AllGather concatenates every rank's src in rank order into dst. len(dst) is the total;
	// src is this rank's shard: len(src) == hi-lo for ShardRange(len(dst), Size(), Rank()).
	AllGather(dst, src Buffer) Work
	// ReduceScatter reduces src element-wise over all ranks and leaves this rank's shard of the
	// result in dst: len(dst) == hi-lo for ShardRange(len(src), Size(), Rank()).
	ReduceScatter(dst, src Buffer, op Op) Work
	// Barrier completes once every rank has entered it.
	Barrier() Work
	// Send sends buf to peer; the matching Recv on peer names this rank and the same tag.
	// Tags are >= 0. Messages with the same (peer, tag) arrive in order.
	Send(buf Buffer, peer int, tag int) Work
	// Recv receives the message from peer with tag into buf; its length must equal len(buf).
	// Once peer has left (Close or Abort), a Recv that no message it sent can satisfy fails
	// at once with ErrPeerGone naming it.
	Recv(buf Buffer, peer int, tag int) Work
	// Close waits for queued operations, tells the peers this rank is leaving and releases
	// the connections. Operations issued after Close fail with ErrClosed. A peer still in a
	// collective this rank did not complete fails it with ErrPeerGone naming this rank. The
	// wait for the peers' own leave notices is bounded by WithCloseTimeout (and by ctx), so
	// Close never waits on peers forever. A rank that fails should call Abort instead, which
	// also tells the peers why.
	Close(ctx context.Context) error
}

// Work is the handle of an asynchronous operation.
type Work interface {
	// Wait blocks until the operation has completed and returns its error. When ctx ends
	// first, the operation is aborted (a collective aborts the whole group, since its peers
	// are mid-transfer) and Wait returns once the buffers are no longer in use.
	Wait(ctx context.Context) error
	// Done is closed when the operation has completed.
	Done() <-chan struct{}
}

// Option configures a group, a store or a rendezvous.
type Option func(*config)

type config struct {
	timeout        time.Duration
	warnAfter      time.Duration // 0: no warning
	warnSet        bool          // WithWarnAfter was given (else: min(30 s, timeout/2))
	connectTimeout time.Duration
	closeTimeout   time.Duration
	streams        int
	chunkBytes     int
	smallBytes     int
	logger         *slog.Logger
	debug          bool
	secret         *string
	transport      string // "", "tcp" or "shm" (InitFromEnv's choice; "" = GP_COMM_TRANSPORT or auto)
	shmRingBytes   int
	onAbort        func(error) // the TCP transport's abort hook (set by the shared-memory transport and the hierarchy)
}

func newConfig(opts []Option) config {
	c := config{
		timeout:        30 * time.Minute,
		connectTimeout: 5 * time.Minute,
		closeTimeout:   10 * time.Second,
		streams:        2,
		chunkBytes:     1 << 20,
		smallBytes:     64 << 10,
		debug:          os.Getenv("GP_COMM_DEBUG") != "" && os.Getenv("GP_COMM_DEBUG") != "0",
	}
	for _, o := range opts {
		o(&c)
	}
	if !c.warnSet {
		c.warnAfter = min(defaultWarnAfter, c.timeout/2)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return c
}

// WithTimeout sets the time one operation may take before it fails with ErrTimeout (default
// 30 minutes, as torch's; InitFromEnv reads GP_COMM_TIMEOUT). A collective that times out
// fails with a *TimeoutError naming the ranks that had not arrived, after asking them (at
// most 2 s more; see StallReport).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// defaultWarnAfter is the warning threshold when neither WithWarnAfter nor
// GP_COMM_WARN_AFTER sets one (or half the timeout, when that is shorter).
const defaultWarnAfter = 30 * time.Second

// WithWarnAfter sets how long a collective may wait before this rank asks its peers what
// they are doing and logs a StallReport as a warning (once per collective): the ranks that
// have not arrived and the last collective each ran. The default is 30 s or half the
// timeout, whichever is shorter (InitFromEnv reads GP_COMM_WARN_AFTER); 0 turns the warning
// off. A warning does not fail the collective.
func WithWarnAfter(d time.Duration) Option {
	return func(c *config) { c.warnAfter, c.warnSet = max(0, d), true }
}

// WithConnectTimeout bounds the rendezvous: reaching the master and waiting for every rank to
// join (default 5 minutes).
func WithConnectTimeout(d time.Duration) Option { return func(c *config) { c.connectTimeout = d } }

// WithCloseTimeout bounds how long Close waits for the peers' leave notices after sending
// its own (default 10 s). The wait lets the peers read what this rank sent last; a peer that
// has not left by then is left behind, which is harmless: a peer still in a collective this
// rank did not complete has already failed it on the leave notice.
func WithCloseTimeout(d time.Duration) Option { return func(c *config) { c.closeTimeout = d } }

// WithStreams sets the number of TCP connections (streams) per peer used by large transfers
// (default 2). All ranks must use the same value.
func WithStreams(n int) Option { return func(c *config) { c.streams = max(1, n) } }

// WithChunkBytes sets the pipelining chunk of ring algorithms and of the shared-memory
// transport's staged all-reduce and broadcast (default 1 MiB). All ranks must use the same
// value.
func WithChunkBytes(n int) Option { return func(c *config) { c.chunkBytes = max(64, n) } }

// WithSmallBytes sets the size up to which collectives use the direct (one-step,
// latency-optimal) algorithms instead of the ring (default 64 KiB of traffic per rank). All
// ranks must use the same value.
func WithSmallBytes(n int) Option { return func(c *config) { c.smallBytes = n } }

// WithTransport chooses the transport InitFromEnv and InitFromConfig build: "tcp", "shm"
// (shared memory, every rank on one host; see NewSHMGroup) or "" (the default: the
// GP_COMM_TRANSPORT environment variable, and when that is unset too, shared memory when
// LOCAL_WORLD_SIZE equals WORLD_SIZE and every rank can map the others' memory, TCP
// otherwise). All ranks must make the same choice.
func WithTransport(name string) Option { return func(c *config) { c.transport = name } }

// WithSHMRingBytes sets the capacity of each shared-memory ring (a power of two; default
// 1 MiB). All ranks must use the same value.
func WithSHMRingBytes(n int) Option {
	return func(c *config) {
		p := 4096
		for p < n {
			p *= 2
		}
		c.shmRingBytes = p
	}
}

// WithLogger sets the logger for collective logging, stall reports and refused connections
// (default: text to stderr).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithDebug logs every collective (also enabled by GP_COMM_DEBUG=1).
func WithDebug(on bool) Option { return func(c *config) { c.debug = on } }

// WithSecret sets the rendezvous secret that the store's and the transports' connections
// present (default: the GP_RDZV_SECRET environment variable, auth.SecretEnv).
func WithSecret(s string) Option { return func(c *config) { c.secret = &s } }

func (c *config) secretValue() string {
	if c.secret != nil {
		return *c.secret
	}
	return auth.Secret()
}

type kind uint8

const (
	kindAllReduce kind = iota + 1
	kindBroadcast
	kindAllGather
	kindReduceScatter
	kindBarrier
	kindSend
	kindRecv
)

func (k kind) String() string {
	switch k {
	case kindAllReduce:
		return "all-reduce"
	case kindBroadcast:
		return "broadcast"
	case kindAllGather:
		return "all-gather"
	case kindReduceScatter:
		return "reduce-scatter"
	case kindBarrier:
		return "barrier"
	case kindSend:
		return "send"
	case kindRecv:
		return "recv"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

type work struct {
	g      *group
	kind   kind
	buf    Buffer // in/out buffer (dst for all-gather and reduce-scatter)
	src    Buffer
	op     Op
	root   int
	peer   int
	tag    int64
	seq    uint64
	done   chan struct{}
	err    error
	cancel func(error)
}

func (w *work) Done() <-chan struct{} { return w.done }

func (w *work) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
	}
	select {
	case <-w.done:
		return w.err
	default:
	}
	if w.cancel != nil {
		w.cancel(fmt.Errorf("rank %d: %s seq %d cancelled by caller: %w", w.g.rank, w.kind, w.seq, ctxErr(ctx)))
	}
	<-w.done
	return w.err
}

func (w *work) finish(err error) {
	w.err = err
	close(w.done)
}

func (w *work) bytes() int {
	switch {
	case w.buf != nil && w.src != nil:
		return max(w.buf.Len()*w.buf.DType().Size(), w.src.Len()*w.src.DType().Size())
	case w.buf != nil:
		return w.buf.Len() * w.buf.DType().Size()
	}
	return 0
}

func (w *work) describe() string {
	return fmt.Sprintf("rank %d: %s seq %d (%s)", w.g.rank, w.kind, w.seq, humanBytes(w.bytes()))
}

// Failed returns a Work that has already completed with err: Done is closed and Wait
// returns err. Callers that keep one Work per operation use it where the operation could
// not be issued.
func Failed(err error) Work { return doneWork{err} }

// doneWork is a Work that has already completed.
type doneWork struct{ err error }

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (d doneWork) Wait(context.Context) error { return d.err }
func (d doneWork) Done() <-chan struct{}      { return closedCh }

// NewGroup runs collectives over transport t. The group owns t and closes it in Close.
func NewGroup(t Transport, opts ...Option) Group {
	return newGroup(t, newConfig(opts))
}

type group struct {
	t          Transport
	cfg        config
	rank, size int

	mu     sync.Mutex // orders issue: seq and queue
	seq    uint64
	closed bool
	queue  chan *work
	exited chan struct{}

	errMu     sync.Mutex
	err       error
	dead      chan struct{}
	opMu      sync.Mutex
	running   uint64          // seq of the collective in progress, 0 when idle
	issued    atomic.Uint64   // the highest seq issued (status replies read it without mu)
	completed uint64          // seq of the last collective that completed without error
	left      []int64         // [peer]: the last collective a peer completed before it left, -1 until then
	gone      []chan struct{} // [peer]: closed when the peer's leave notice arrives (fails its Recvs)

	watchers  sync.WaitGroup // leave-notice watchers (leave.go) and status responders (flight.go)
	stopWatch context.CancelFunc
	probeCtx  context.Context // ends with stopWatch

	flightMu  sync.Mutex
	flight    [flightSize]opRecord // the flight recorder: a ring of the collectives started
	flightN   uint64               // records written
	probeMu   sync.Mutex           // one probe at a time
	probeID   uint64
	probes    sync.WaitGroup // running probes (stall.go), registered under opMu
	closeOnce sync.Once
	closeErr  error

	scratch []byte
	tmp     [][]byte
	p2p     sync.WaitGroup
	onClose []func() error
	store   *store.Store

	hier   *hierarchy                 // set when collectives run hierarchically (hier.go)
	parent *group                     // a hierarchy's sub-group: failures belong to parent
	ranks  []int                      // a sub-group's ranks in the parent, for messages (nil: identity)
	segs   func(seg int) (lo, hi int) // a sub-group ring's segments (nil: ShardRange)
}

func newGroup(t Transport, cfg config) *group {
	g := &group{
		t: t, cfg: cfg, rank: t.Rank(), size: t.Size(),
		queue:  make(chan *work, 4096),
		exited: make(chan struct{}),
		dead:   make(chan struct{}),
		tmp:    make([][]byte, t.Streams()),
		left:   make([]int64, t.Size()),
		gone:   make([]chan struct{}, t.Size()),
	}
	for p := range g.left {
		g.left[p] = -1
		g.gone[p] = make(chan struct{})
	}
	var wctx context.Context
	wctx, g.stopWatch = context.WithCancel(context.Background())
	g.probeCtx = wctx
	g.watchLeaves(wctx)
	g.answerStatus(wctx)
	go g.loop()
	return g
}

func (g *group) Rank() int { return g.rank }
func (g *group) Size() int { return g.size }

func (g *group) AllReduce(buf Buffer, op Op) Work {
	if buf == nil || !op.valid() {
		return g.invalid(kindAllReduce, "nil buffer or unknown op %v", op)
	}
	return g.issue(&work{kind: kindAllReduce, buf: buf, op: op})
}

func (g *group) Broadcast(buf Buffer, root int) Work {
	if buf == nil || root < 0 || root >= g.size {
		return g.invalid(kindBroadcast, "nil buffer or root %d outside [0,%d)", root, g.size)
	}
	return g.issue(&work{kind: kindBroadcast, buf: buf, root: root})
}

func (g *group) AllGather(dst, src Buffer) Work {
	if dst == nil || src == nil || dst.DType() != src.DType() {
		return g.invalid(kindAllGather, "nil buffers or dtypes differ")
	}
	if lo, hi := ShardRange(dst.Len(), g.size, g.rank); src.Len() != hi-lo {
		return g.invalid(kindAllGather, "len(src)=%d, want %d (shard %d of %d elements over %d ranks)", src.Len(), hi-lo, g.rank, dst.Len(), g.size)
	}
	return g.issue(&work{kind: kindAllGather, buf: dst, src: src})
}

func (g *group) ReduceScatter(dst, src Buffer, op Op) Work {
	if dst == nil || src == nil || dst.DType() != src.DType() || !op.valid() {
		return g.invalid(kindReduceScatter, "nil buffers, dtypes differ or unknown op %v", op)
	}
	if lo, hi := ShardRange(src.Len(), g.size, g.rank); dst.Len() != hi-lo {
		return g.invalid(kindReduceScatter, "len(dst)=%d, want %d (shard %d of %d elements over %d ranks)", dst.Len(), hi-lo, g.rank, src.Len(), g.size)
	}
	return g.issue(&work{kind: kindReduceScatter, buf: dst, src: src, op: op})
}

func (g *group) Barrier() Work { return g.issue(&work{kind: kindBarrier}) }

func (g *group) Send(buf Buffer, peer int, tag int) Work {
	return g.p2pWork(kindSend, buf, peer, int64(tag), tag >= 0)
}

func (g *group) Recv(buf Buffer, peer int, tag int) Work {
	return g.p2pWork(kindRecv, buf, peer, int64(tag), tag >= 0)
}

func (g *group) invalid(k kind, format string, args ...any) Work {
	return doneWork{fmt.Errorf("rank %d: %s: %w: %s", g.rank, k, ErrInvalid, fmt.Sprintf(format, args...))}
}

func (g *group) issue(w *work) Work {
	w.g = g
	w.done = make(chan struct{})
	w.cancel = func(err error) { g.fail(err, true) }
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return doneWork{fmt.Errorf("rank %d: %s: %w", g.rank, w.kind, ErrClosed)}
	}
	g.seq++
	w.seq = g.seq
	g.issued.Store(g.seq)
	g.queue <- w
	return w
}

// p2pWork runs a Send or Recv beside the collectives. Negative tags are reserved for the
// package's own protocols (the monitored barrier).
func (g *group) p2pWork(k kind, buf Buffer, peer int, tag int64, tagOK bool) Work {
	if buf == nil || peer < 0 || peer >= g.size || peer == g.rank || !tagOK {
		return g.invalid(k, "nil buffer, peer %d not another rank of [0,%d), or negative tag %d", peer, g.size, tag)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return doneWork{fmt.Errorf("rank %d: %s: %w", g.rank, k, ErrClosed)}
	}
	g.p2p.Add(1)
	g.mu.Unlock()
	ctx, cancel := context.WithCancelCause(context.Background())
	w := &work{g: g, kind: k, buf: buf, peer: peer, tag: tag, done: make(chan struct{}),
		cancel: func(err error) { cancel(err) }}
	go func() {
		defer g.p2p.Done()
		defer cancel(nil)
		tctx, tcancel := context.WithTimeoutCause(ctx, g.cfg.timeout, fmt.Errorf("%w after %v", ErrTimeout, g.cfg.timeout))
		defer tcancel()
		var err error
		if k == kindSend {
			err = g.t.SendMsg(tctx, peer, tag, buf.bytes())
		} else {
			err = g.recvMsg(tctx, cancel, peer, tag, buf.bytes())
		}
		if err != nil && tctx.Err() != nil {
			err = context.Cause(tctx)
		}
		if err != nil {
			err = fmt.Errorf("rank %d: %s %s to/from rank %d tag %d: %w", g.rank, k, humanBytes(len(buf.bytes())), peer, tag, err)
		}
		w.finish(err)
	}()
	return w
}

// fail poisons the group with err and aborts the transport (telling the peers when notify).
func (g *group) fail(err error, notify bool) {
	if g.parent != nil {
		g.parent.fail(err, notify)
		return
	}
	g.errMu.Lock()
	if g.err != nil {
		g.errMu.Unlock()
		return
	}
	g.err = err
	close(g.dead)
	g.errMu.Unlock()
	g.t.Abort(err, notify)
	if g.hier != nil && g.hier.localT != nil {
		g.hier.localT.Abort(err, false)
	}
}

func (g *group) failure() error {
	if g.parent != nil {
		return g.parent.failure()
	}
	g.errMu.Lock()
	defer g.errMu.Unlock()
	return g.err
}

func (g *group) loop() {
	defer close(g.exited)
	for w := range g.queue {
		if err := g.failure(); err != nil {
			w.finish(fmt.Errorf("%s: group failed earlier: %w", w.describe(), err))
			continue
		}
		start := time.Now()
		g.record(w) // before running is set, so a peer that sees it running sees the record
		g.opMu.Lock()
		g.running = w.seq
		gone := g.leftPeer(w.seq)
		g.opMu.Unlock()
		if gone != nil {
			err := fmt.Errorf("%s: %w", w.describe(), gone)
			g.recordEnd(w.seq, err)
			g.fail(err, true)
			g.opMu.Lock()
			g.running = 0
			g.opMu.Unlock()
			w.finish(err)
			continue
		}
		stop := g.watchStall(w)
		algo, err := g.run(w)
		g.recordEnd(w.seq, err)
		g.opMu.Lock()
		g.running = 0
		if err == nil {
			g.completed = w.seq
		}
		g.opMu.Unlock()
		stop()
		if err != nil {
			// The group's first failure is the root cause; later errors of this op echo it.
			if first := g.failure(); first != nil && !errors.Is(err, first) {
				err = fmt.Errorf("%w (first failure: %w)", err, first)
			}
			err = fmt.Errorf("%s: %w", w.describe(), err)
			g.fail(err, true)
		}
		if g.cfg.debug {
			g.cfg.logger.Info("comm: collective", "rank", g.rank, "op", w.kind.String(), "seq", w.seq,
				"bytes", w.bytes(), "algo", algo, "took", time.Since(start), "err", err)
		}
		w.finish(err)
	}
}

// Close implements Group.Close. Calls after the first wait for it and return its result.
func (g *group) Close(ctx context.Context) error {
	g.closeOnce.Do(func() { g.closeErr = g.close(ctx) })
	return g.closeErr
}

// Abort implements Aborter (see the function Abort): it fails the group with an *AbortError
// naming this rank and reason, which the transport sends to every peer, then closes it
// within abortLinger (or ctx). It returns the error of closing, not reason.
func (g *group) Abort(ctx context.Context, reason error) error {
	if reason == nil {
		reason = errors.New("no reason given")
	}
	g.fail(&AbortError{Rank: g.rank, Reason: reason}, true)
	ctx, cancel := context.WithTimeout(ctx, abortLinger)
	defer cancel()
	return g.Close(ctx)
}

func (g *group) close(ctx context.Context) error {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.queue)
	}
	g.mu.Unlock()
	select {
	case <-g.exited:
	case <-ctx.Done():
		g.fail(fmt.Errorf("rank %d: close: %w", g.rank, ctxErr(ctx)), true)
		<-g.exited
	}
	p2pDone := make(chan struct{})
	go func() { g.p2p.Wait(); close(p2pDone) }()
	select {
	case <-p2pDone:
	case <-ctx.Done():
		g.fail(fmt.Errorf("rank %d: close: %w", g.rank, ctxErr(ctx)), true)
		<-p2pDone
	}
	g.sendLeave(ctx)
	pctx, cancel := context.WithTimeout(ctx, g.cfg.closeTimeout)
	err := g.t.Close(pctx)
	cancel()
	g.stopWatch()
	g.watchers.Wait()
	g.probes.Wait()
	for _, f := range g.onClose {
		err = errors.Join(err, f())
	}
	if err != nil {
		return fmt.Errorf("rank %d: close: %w", g.rank, err)
	}
	return nil
}
