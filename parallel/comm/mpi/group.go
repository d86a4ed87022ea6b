package mpi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Option configures a Group.
type Option func(*config)

type config struct {
	timeout      time.Duration
	warnAfter    time.Duration
	warnSet      bool
	closeTimeout time.Duration
	logger       *slog.Logger
	debug        bool
	ringBytes    [numKinds]int
}

// WithTimeout bounds each operation (default 30 minutes, as comm's). A collective or send
// that runs past it ends the job (see Note [Failures end the job]); a receive is cancelled
// and fails with comm.ErrTimeout.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithWarnAfter logs a warning, once per operation, when a collective has waited d (default
// 30 s or half the timeout; 0 turns it off).
func WithWarnAfter(d time.Duration) Option {
	return func(c *config) { c.warnAfter, c.warnSet = max(0, d), true }
}

// WithCloseTimeout bounds the wait of the last Close of the process for MPI_Finalize, which
// waits for every rank to finalize too (default 10 s, as comm's).
func WithCloseTimeout(d time.Duration) Option { return func(c *config) { c.closeTimeout = d } }

// WithRingBytes sets the size in bytes (of AllReduce's and Broadcast's buffer, of
// AllGather's dst and ReduceScatter's src) from which AllReduce, ReduceScatter, AllGather
// and Broadcast run the package's ring and chain over MPI's point-to-point messages
// instead of OpenMPI's collectives, for all four (0: always OpenMPI's). The defaults differ
// by collective (DefaultRingBytes). See Note [Ring over MPI messages]. All ranks must use
// the same value: a rank that runs OpenMPI's collective while another runs the ring waits
// until the timeout.
func WithRingBytes(n int) Option {
	return func(c *config) {
		for k := range c.ringBytes {
			c.ringBytes[k] = max(0, n)
		}
	}
}

// DefaultRingBytes returns the size in bytes from which the collective named kind
// ("all-reduce", "reduce-scatter", "all-gather" or "broadcast") runs the package's
// algorithm unless WithRingBytes says otherwise (0: never), and false for another name.
func DefaultRingBytes(kind string) (int, bool) {
	for k, name := range kindNames {
		if name == kind {
			return defaultRingBytes[k], true
		}
	}
	return 0, false
}

// defaultRingBytes are the thresholds measured by bench/mpi (Note [Ring thresholds]).
var defaultRingBytes = [numKinds]int{
	kindAllReduce:     4 << 20,
	kindReduceScatter: 16 << 20,
	kindAllGather:     0,
	kindBroadcast:     0,
}

// WithLogger sets the logger of warnings, aborts and debug lines (default: text to stderr).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithDebug logs every operation (rank, op, sequence number, bytes, time).
func WithDebug(on bool) Option { return func(c *config) { c.debug = on } }

// Group is a comm.Group over MPI: a duplicate of MPI_COMM_WORLD, so its rank and size are
// the job's. Its operations are nonblocking MPI calls (MPI_Iallreduce, MPI_Ibcast,
// MPI_Iallgather(v), MPI_Ireduce_scatter, MPI_Ibarrier, MPI_Isend, MPI_Irecv) posted in
// issue order on the process's MPI thread and completed by it (Note [One MPI thread]), or,
// for large collectives (WithRingBytes), the package's ring and chain over MPI_Isend and
// MPI_Irecv on a second duplicate, tagged with the collective's sequence number.
type Group struct {
	e          *engine
	cfg        config
	comm       uintptr // the collectives MPI runs and the users' messages
	ringComm   uintptr // the messages of the package's own ring all-reduce (ring.go)
	rank, size int

	mu     sync.Mutex // orders issue
	seq    uint64
	closed bool
	ops    sync.WaitGroup

	errMu sync.Mutex
	err   error

	closeOnce sync.Once
	closeErr  error
}

var _ comm.Group = (*Group)(nil)
var _ comm.Aborter = (*Group)(nil)

// New initialises MPI when this is the process's first group (MPI_Init_thread on the
// package's MPI thread; see Load for where libmpi comes from) and returns a group over a
// duplicate of MPI_COMM_WORLD. Every rank of the job calls it (the duplication is
// collective); it waits for them until ctx ends. A process can hold several groups; the last
// Close finalizes MPI, after which New fails.
func New(ctx context.Context, opts ...Option) (*Group, error) {
	cfg := config{timeout: 30 * time.Minute, closeTimeout: 10 * time.Second, ringBytes: defaultRingBytes}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.warnSet {
		cfg.warnAfter = min(30*time.Second, cfg.timeout/2)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("mpi: timeout %v: %w", cfg.timeout, comm.ErrInvalid)
	}
	e, err := startEngine()
	if err != nil {
		return nil, err
	}
	engMu.Lock()
	engGroups++
	engMu.Unlock()
	g := &Group{e: e, cfg: cfg, rank: e.rank, size: e.size}
	if g.comm, err = g.dup(ctx); err == nil {
		g.ringComm, err = g.dup(ctx)
	}
	if err != nil {
		g.release(context.Background())
		return nil, fmt.Errorf("mpi: rank %d of %d: duplicating MPI_COMM_WORLD: %w", e.rank, e.size, err)
	}
	if e.provided < ThreadFunneled {
		cfg.logger.Warn("comm/mpi: MPI provides only MPI_THREAD_SINGLE; every call runs on one thread anyway", "rank", g.rank)
	}
	return g, nil
}

// dup duplicates MPI_COMM_WORLD with MPI_Comm_idup, waiting until ctx ends.
func (g *Group) dup(ctx context.Context) (uintptr, error) {
	newcomm := new(uintptr) // written by MPI when the request completes: pinned until then
	o := g.newOp("comm-dup", 0, -1)
	o.pinp(unsafe.Pointer(newcomm))
	o.post = func() (uintptr, error) {
		var req uintptr
		return req, codeErr("MPI_Comm_idup", mpiIdup(handles[hCommWorld], newcomm, &req))
	}
	g.ops.Add(1)
	g.e.calls <- func(e *engine) { e.post(o) }
	select {
	case <-o.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for every rank to create the group: %w", context.Cause(ctx))
	}
	if o.err != nil {
		return 0, o.err
	}
	c := *newcomm
	return c, g.e.do(ctx, func(*engine) error { return codeErr("MPI_Comm_set_errhandler", mpiSetErrhandler(c)) })
}

// Rank is this process's rank in MPI_COMM_WORLD.
func (g *Group) Rank() int { return g.rank }

// Size is the number of processes in MPI_COMM_WORLD.
func (g *Group) Size() int { return g.size }

// Backend names the backend for comm.TransportOf: "mpi".
func (g *Group) Backend() string { return "mpi" }

// ThreadLevel is the thread level MPI_Init_thread provided (ThreadMultiple requested).
func (g *Group) ThreadLevel() int { return g.e.provided }

// Version is MPI_Get_library_version's first line ("Open MPI v4.1.4").
func (g *Group) Version() string { return g.e.version }

// AllReduce implements comm.Group with MPI_Iallreduce in place, or from WithRingBytes on
// with the package's ring over MPI messages (Note [Ring over MPI messages]); Avg is a sum
// divided by Size() on every rank once it completes.
func (g *Group) AllReduce(buf comm.Buffer, rop comm.Op) comm.Work {
	const k = "all-reduce"
	p, n, dt, err := g.reducible(buf, rop)
	if err != nil {
		return g.invalid(k, err)
	}
	mop := mpiOp(rop)
	nb := buf.Len() * buf.DType().Size()
	return g.issue(k, nb, func(o *op) {
		if g.useRing(kindAllReduce, nb) {
			o.run = func() error { return g.ringAllReduce(g.tag(o), buf, rop) }
			return
		}
		o.pinp(p)
		o.post = func() (uintptr, error) {
			var req uintptr
			return req, codeErr("MPI_Iallreduce", mpiIallreduce(mpiInPlace, uintptr(p), n, dt, mop, g.comm, &req))
		}
		if rop == comm.Avg {
			o.after = func() { divide(buf, g.size) }
		}
	})
}

// Broadcast implements comm.Group with MPI_Ibcast, or from WithRingBytes on (off by
// default) with a pipelined chain over MPI messages (Note [Ring over MPI messages]).
func (g *Group) Broadcast(buf comm.Buffer, root int) comm.Work {
	const k = "broadcast"
	if root < 0 || root >= g.size {
		return g.invalid(k, fmt.Errorf("root %d outside [0,%d)", root, g.size))
	}
	p, n, dt, err := view(buf)
	if err != nil {
		return g.invalid(k, err)
	}
	es := buf.DType().Size()
	return g.issue(k, n*es, func(o *op) {
		if g.useRing(kindBroadcast, n*es) {
			o.run = func() error {
				if err := g.agree(g.tag(o), header{kind: kindBroadcast, dtype: buf.DType(), total: n, root: root}); err != nil {
					return err
				}
				return g.chainBroadcast(g.tag(o), p, n, dt, es, root)
			}
			return
		}
		o.pinp(p)
		o.post = func() (uintptr, error) {
			var req uintptr
			return req, codeErr("MPI_Ibcast", mpiIbcast(uintptr(p), n, dt, root, g.comm, &req))
		}
	})
}

// AllGather implements comm.Group with MPI_Iallgather (MPI_Iallgatherv when Size() does not
// divide len(dst)), or from WithRingBytes on (off by default) with the package's ring over
// MPI messages; src may be dst's own shard (then MPI_IN_PLACE), or any other buffer.
func (g *Group) AllGather(dst, src comm.Buffer) comm.Work {
	const k = "all-gather"
	dp, total, dt, err := view(dst)
	if err == nil && (src == nil || src.DType() != dst.DType()) {
		err = errors.New("nil src or dtypes differ")
	}
	if err != nil {
		return g.invalid(k, err)
	}
	sp, sn, _, err := view(src)
	if err != nil {
		return g.invalid(k, err)
	}
	lo, hi := comm.ShardRange(total, g.size, g.rank)
	if sn != hi-lo {
		return g.invalid(k, fmt.Errorf("len(src)=%d, want %d (shard %d of %d elements over %d ranks)", sn, hi-lo, g.rank, total, g.size))
	}
	es := dst.DType().Size()
	send := uintptr(sp)
	var staged []byte
	switch {
	case sn > 0 && send == uintptr(dp)+uintptr(lo*es):
		send = mpiInPlace
	case sn > 0 && overlap(sp, sn*es, dp, total*es):
		staged = append([]byte(nil), unsafe.Slice((*byte)(sp), sn*es)...)
		send = uintptr(unsafe.Pointer(&staged[0]))
	}
	counts, displs := shardCounts(total, g.size)
	return g.issue(k, total*es, func(o *op) {
		if g.useRing(kindAllGather, total*es) {
			o.run = func() error {
				if err := g.agree(g.tag(o), header{kind: kindAllGather, dtype: dst.DType(), total: total}); err != nil {
					return err
				}
				if sn > 0 && sp != unsafe.Add(dp, lo*es) {
					copy(unsafe.Slice((*byte)(unsafe.Add(dp, lo*es)), sn*es), unsafe.Slice((*byte)(sp), sn*es)) // a memmove where they overlap
				}
				return g.ringAllGather(g.tag(o), segments{dp, total, g.size, es}, dt)
			}
			return
		}
		o.pinp(dp)
		o.pinp(sp)
		if staged != nil {
			o.pinp(unsafe.Pointer(&staged[0]))
		}
		o.pinp(unsafe.Pointer(&counts[0]))
		o.pinp(unsafe.Pointer(&displs[0]))
		o.keep = staged
		o.post = func() (uintptr, error) {
			var req uintptr
			if total%g.size == 0 {
				return req, codeErr("MPI_Iallgather", mpiIallgather(send, sn, uintptr(dp), sn, dt, g.comm, &req))
			}
			return req, codeErr("MPI_Iallgatherv", mpiIallgatherv(send, sn, uintptr(dp),
				uintptr(unsafe.Pointer(&counts[0])), uintptr(unsafe.Pointer(&displs[0])), dt, g.comm, &req))
		}
	})
}

// ReduceScatter implements comm.Group with MPI_Ireduce_scatter, or from WithRingBytes on
// (16 MiB of src) with the package's ring over MPI messages; src is left unchanged. dst may
// overlap src (the result is then received aside and copied, unless the ring writes it
// over src's own shard). Avg divides this rank's shard by Size().
func (g *Group) ReduceScatter(dst, src comm.Buffer, rop comm.Op) comm.Work {
	const k = "reduce-scatter"
	sp, total, dt, err := g.reducible(src, rop)
	if err == nil && (dst == nil || dst.DType() != src.DType()) {
		err = errors.New("nil dst or dtypes differ")
	}
	if err != nil {
		return g.invalid(k, err)
	}
	dp, dn, _, err := view(dst)
	if err != nil {
		return g.invalid(k, err)
	}
	lo, hi := comm.ShardRange(total, g.size, g.rank)
	if dn != hi-lo {
		return g.invalid(k, fmt.Errorf("len(dst)=%d, want %d (shard %d of %d elements over %d ranks)", dn, hi-lo, g.rank, total, g.size))
	}
	es := src.DType().Size()
	ring := g.useRing(kindReduceScatter, total*es)
	out := dp
	var aside []byte
	// The ring may write its result over src's own shard (ringReduceScatter); any other
	// overlap, and any overlap for MPI_Ireduce_scatter, receives aside and copies.
	if dn > 0 && overlap(sp, total*es, dp, dn*es) && !(ring && dp == unsafe.Add(sp, lo*es)) {
		aside = make([]byte, dn*es)
		out = unsafe.Pointer(&aside[0])
	}
	recv := uintptr(out)
	counts, _ := shardCounts(total, g.size)
	mop := mpiOp(rop)
	return g.issue(k, total*es, func(o *op) {
		if ring {
			o.run = func() error {
				if err := g.agree(g.tag(o), header{kind: kindReduceScatter, dtype: src.DType(), total: total, op: rop}); err != nil {
					return err
				}
				err := g.ringReduceScatter(g.tag(o), segments{sp, total, g.size, es}, false, out, dt, src.DType(), rop)
				if err != nil {
					return err
				}
				if aside != nil {
					copy(unsafe.Slice((*byte)(dp), dn*es), aside)
				}
				if rop == comm.Avg {
					divide(dst, g.size)
				}
				return nil
			}
			return
		}
		o.pinp(sp)
		o.pinp(dp)
		if aside != nil {
			o.pinp(unsafe.Pointer(&aside[0]))
		}
		o.pinp(unsafe.Pointer(&counts[0]))
		o.post = func() (uintptr, error) {
			var req uintptr
			return req, codeErr("MPI_Ireduce_scatter", mpiIreduceScatter(uintptr(sp), recv, uintptr(unsafe.Pointer(&counts[0])), dt, mop, g.comm, &req))
		}
		o.after = func() {
			if aside != nil {
				copy(unsafe.Slice((*byte)(dp), dn*es), aside)
			}
			if rop == comm.Avg {
				divide(dst, g.size)
			}
		}
	})
}

// useRing reports whether a collective of kind over nb bytes runs the package's algorithm.
func (g *Group) useRing(kind, nb int) bool {
	t := g.cfg.ringBytes[kind]
	return g.size > 1 && t > 0 && nb >= t
}

// tag is the MPI tag of the messages of collective o: its sequence number, wrapped.
func (g *Group) tag(o *op) int { return int(o.seq % uint64(g.e.tagUB+1)) }

// Barrier implements comm.Group with MPI_Ibarrier.
func (g *Group) Barrier() comm.Work {
	return g.issue("barrier", 0, func(o *op) {
		o.post = func() (uintptr, error) {
			var req uintptr
			return req, codeErr("MPI_Ibarrier", mpiIbarrier(g.comm, &req))
		}
	})
}

// Send implements comm.Group with MPI_Isend; tags run from 0 to the MPI_TAG_UB of the
// library (2^31-1 in OpenMPI's ob1).
func (g *Group) Send(buf comm.Buffer, peer, tag int) comm.Work {
	return g.p2p("send", buf, peer, tag)
}

// Recv implements comm.Group with MPI_Irecv. A message of another length than buf fails
// with comm.ErrInvalid. Unlike comm's transports, a peer that closed its group is not
// noticed: a Recv it will never satisfy waits for the timeout (then it is cancelled).
func (g *Group) Recv(buf comm.Buffer, peer, tag int) comm.Work {
	return g.p2p("recv", buf, peer, tag)
}

func (g *Group) p2p(k string, buf comm.Buffer, peer, tag int) comm.Work {
	if peer < 0 || peer >= g.size || peer == g.rank || tag < 0 || tag > g.e.tagUB {
		return g.invalid(k, fmt.Errorf("peer %d not another rank of [0,%d), or tag %d outside [0,%d]", peer, g.size, tag, g.e.tagUB))
	}
	p, n, dt, err := view(buf)
	if err != nil {
		return g.invalid(k, err)
	}
	nb := n * buf.DType().Size()
	return g.issueP2P(k, nb, peer, tag, func(o *op) {
		o.pinp(p)
		if k == "recv" {
			o.recvBytes = nb
		}
		o.post = func() (uintptr, error) {
			var req uintptr
			if k == "recv" {
				return req, codeErr("MPI_Irecv", mpiIrecv(uintptr(p), n, dt, peer, tag, g.comm, &req))
			}
			return req, codeErr("MPI_Isend", mpiIsend(uintptr(p), n, dt, peer, tag, g.comm, &req))
		}
	})
}

// Close implements comm.Group: it waits for the group's operations (bounded by ctx), frees
// its communicator and, when it is the process's last group, calls MPI_Finalize, which waits
// for every rank to finalize, bounded by WithCloseTimeout and ctx. Calls after the first
// return the first's result.
func (g *Group) Close(ctx context.Context) error {
	g.closeOnce.Do(func() { g.closeErr = g.close(ctx) })
	return g.closeErr
}

func (g *Group) close(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.ops.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("mpi: rank %d: close: waiting for the group's operations: %w", g.rank, context.Cause(ctx))
	}
	if err := g.failure(); err != nil {
		return fmt.Errorf("mpi: rank %d: close: %w", g.rank, err)
	}
	return g.release(ctx)
}

// release frees the communicator and finalizes MPI after the process's last group.
func (g *Group) release(ctx context.Context) error {
	var err error
	for _, c := range []uintptr{g.comm, g.ringComm} {
		if c != 0 {
			err = errors.Join(err, g.e.do(ctx, func(*engine) error { return codeErr("MPI_Comm_free", mpiCommFree(c)) }))
		}
	}
	engMu.Lock()
	engGroups--
	last := engGroups == 0
	if last {
		eng, finalized = nil, true
	}
	engMu.Unlock()
	if last {
		fctx, cancel := context.WithTimeout(ctx, g.cfg.closeTimeout)
		defer cancel()
		err = errors.Join(err, g.e.do(fctx, func(e *engine) error {
			e.stop = true
			return codeErr("MPI_Finalize", mpiFinalize())
		}))
	}
	if err != nil {
		return fmt.Errorf("mpi: rank %d: close: %w", g.rank, err)
	}
	return nil
}

// Abort implements comm.Aborter. MPI has one way to stop peers that may be inside a
// collective: MPI_Abort, which ends every process of the job (mpirun kills them and exits
// with an error). Abort logs reason and calls it, so it does not return unless MPI_Abort
// failed.
func (g *Group) Abort(ctx context.Context, reason error) error {
	if reason == nil {
		reason = errors.New("no reason given")
	}
	return g.fatal(&comm.AbortError{Rank: g.rank, Reason: reason})
}
