package mpi

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Note [Failures end the job]: MPI cannot cancel a collective or a send once posted, nor
// release its buffers early, and offers no way to tell a peer blocked inside a collective
// to give up other than MPI_Abort, which ends every process of the job. So a collective or
// send that passes the timeout, or whose Wait context ends, poisons the group, logs the
// error and calls MPI_Abort: mpirun then kills every rank and exits with an error naming
// the rank that aborted (the job dies within seconds rather than hanging). The same happens
// on comm.Abort. A receive is the exception: MPI can cancel it, so a receive that times out
// or is cancelled fails alone (comm.ErrTimeout or comm.ErrAborted) and the group goes on.
// A rank that dies is mpirun's to notice: it kills the job's other processes.

var (
	errCancelled = errors.New("cancelled")
	errInvalid   = comm.ErrInvalid
)

// op is one operation: one MPI request.
type op struct {
	g         *Group
	kind      string
	seq       uint64 // collectives' issue number; 0 for point-to-point
	peer, tag int
	bytes     int
	recvBytes int                     // a receive's expected size, -1 for other operations
	post      func() (uintptr, error) // runs on the MPI thread: posts the call
	run       func() error            // instead of post: a collective made of messages (ring.go)
	after     func()                  // runs once the request completed without error
	keep      []byte                  // staging memory MPI uses until completion
	pin       runtime.Pinner
	start     time.Time

	once   sync.Once
	done   chan struct{}
	err    error
	mu     sync.Mutex
	reason error // why a receive was cancelled
	timers []*time.Timer
}

func (g *Group) newOp(kind string, bytes, recvBytes int) *op {
	return &op{g: g, kind: kind, bytes: bytes, recvBytes: recvBytes, done: make(chan struct{}), start: time.Now()}
}

// pinp pins the Go memory p points into until the operation completes.
func (o *op) pinp(p unsafe.Pointer) {
	if p != nil {
		o.pin.Pin(p)
	}
}

// Done implements comm.Work.
func (o *op) Done() <-chan struct{} { return o.done }

// Wait implements comm.Work. When ctx ends first, a receive is cancelled and fails with
// comm.ErrAborted; any other operation ends the job (Note [Failures end the job]).
func (o *op) Wait(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
	}
	select {
	case <-o.done:
		return o.err
	default:
	}
	if err := o.g.interrupt(o, fmt.Errorf("cancelled by caller: %w: %w", comm.ErrAborted, context.Cause(ctx))); err != nil {
		return err
	}
	<-o.done
	return o.err
}

func (o *op) describe() string {
	if strings.HasSuffix(o.kind, "send") || strings.HasSuffix(o.kind, "recv") {
		return fmt.Sprintf("rank %d: %s %d bytes to/from rank %d tag %d", o.g.rank, o.kind, o.bytes, o.peer, o.tag)
	}
	return fmt.Sprintf("rank %d: %s seq %d (%d bytes)", o.g.rank, o.kind, o.seq, o.bytes)
}

// complete is called on the MPI thread once the request ended; the rest runs aside so
// that the thread goes back to polling.
func (o *op) complete(err error) {
	o.once.Do(func() { go o.finish(err) })
}

func (o *op) finish(err error) {
	for _, t := range o.timers {
		t.Stop()
	}
	if errors.Is(err, errCancelled) {
		o.mu.Lock()
		err = o.reason
		o.mu.Unlock()
	}
	if err == nil && o.after != nil {
		o.after()
	}
	o.pin.Unpin()
	o.keep = nil
	if err != nil {
		var mis *mismatchError
		err = fmt.Errorf("%s: %w", o.describe(), err)
		if o.seq != 0 && !errors.As(err, &mis) {
			o.g.fail(err) // a mismatch found by agree moved no data: the group goes on
		}
	}
	if o.g.cfg.debug {
		o.g.cfg.logger.Info("comm/mpi: operation", "rank", o.g.rank, "op", o.kind, "seq", o.seq, "bytes", o.bytes,
			"took", time.Since(o.start), "err", err)
	}
	o.err = err
	close(o.done)
	o.g.ops.Done()
}

// issue queues a collective: setup fills in o.post (and pins), then it is posted on the MPI
// thread in issue order.
func (g *Group) issue(kind string, bytes int, setup func(*op)) comm.Work {
	o := g.newOp(kind, bytes, -1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return comm.Failed(fmt.Errorf("rank %d: %s: %w", g.rank, kind, comm.ErrClosed))
	}
	if err := g.failure(); err != nil {
		return comm.Failed(fmt.Errorf("rank %d: %s: group failed earlier: %w", g.rank, kind, err))
	}
	g.seq++
	o.seq = g.seq
	setup(o)
	g.arm(o)
	g.ops.Add(1)
	if o.run != nil {
		go func() { o.complete(o.run()) }()
		return o
	}
	g.e.calls <- func(e *engine) { e.post(o) }
	return o
}

func (g *Group) issueP2P(kind string, bytes, peer, tag int, setup func(*op)) comm.Work {
	o := g.newOp(kind, bytes, -1)
	o.peer, o.tag = peer, tag
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return comm.Failed(fmt.Errorf("rank %d: %s: %w", g.rank, kind, comm.ErrClosed))
	}
	if err := g.failure(); err != nil {
		return comm.Failed(fmt.Errorf("rank %d: %s: group failed earlier: %w", g.rank, kind, err))
	}
	setup(o)
	g.arm(o)
	g.ops.Add(1)
	g.e.calls <- func(e *engine) { e.post(o) }
	return o
}

// arm starts o's timeout and, for collectives, its warning.
func (g *Group) arm(o *op) {
	d := g.cfg.timeout
	o.timers = append(o.timers, time.AfterFunc(d, func() {
		g.interrupt(o, fmt.Errorf("%w after %v", comm.ErrTimeout, d))
	}))
	if w := g.cfg.warnAfter; o.seq != 0 && w > 0 && w < d {
		o.timers = append(o.timers, time.AfterFunc(w, func() {
			g.cfg.logger.Warn("comm/mpi: collective waiting", "rank", g.rank, "op", o.kind, "seq", o.seq, "bytes", o.bytes, "waited", w)
		}))
	}
}

// interrupt ends o because of reason: a receive is cancelled (nil: it completes with reason);
// anything else ends the job (Note [Failures end the job]), and the error is returned only
// if MPI_Abort returned.
func (g *Group) interrupt(o *op, reason error) error {
	select {
	case <-o.done:
		return nil
	default:
	}
	if o.recvBytes >= 0 {
		o.mu.Lock()
		if o.reason == nil {
			o.reason = reason
		}
		o.mu.Unlock()
		g.e.calls <- func(e *engine) { e.cancel(o) }
		return nil
	}
	return g.fatal(fmt.Errorf("%s: %w", o.describe(), reason))
}

// fatal poisons the group with err, logs it and ends the job with MPI_Abort.
func (g *Group) fatal(err error) error {
	g.fail(err)
	g.cfg.logger.Error("comm/mpi: ending the MPI job with MPI_Abort (MPI cannot cancel a collective)", "rank", g.rank, "err", err)
	return fmt.Errorf("%w (%w)", err, g.e.abort(1))
}

func (g *Group) fail(err error) {
	g.errMu.Lock()
	defer g.errMu.Unlock()
	if g.err == nil {
		g.err = err
	}
}

func (g *Group) failure() error {
	g.errMu.Lock()
	defer g.errMu.Unlock()
	return g.err
}

func (g *Group) invalid(kind string, err error) comm.Work {
	return comm.Failed(fmt.Errorf("rank %d: %s: %w: %w", g.rank, kind, comm.ErrInvalid, err))
}

// view returns the first element, length and MPI datatype of a slice buffer: float32,
// float64, int64, or any 2-byte element type (moved as uint16).
func view(b comm.Buffer) (unsafe.Pointer, int, uintptr, error) {
	if b == nil {
		return nil, 0, 0, errors.New("nil buffer")
	}
	v := reflect.ValueOf(b)
	if v.Kind() != reflect.Slice {
		return nil, 0, 0, fmt.Errorf("buffer of type %T is not a slice", b)
	}
	n := v.Len()
	if n > 1<<31-1 {
		return nil, 0, 0, fmt.Errorf("%d elements: MPI counts are 32-bit ints", n)
	}
	var dt uintptr
	switch d := b.DType(); {
	case d == comm.Float32:
		dt = handles[hFloat]
	case d == comm.Float64:
		dt = handles[hDouble]
	case d == comm.Int64:
		dt = handles[hInt64]
	case d.Size() == 2:
		dt = handles[hUint16]
	default:
		return nil, 0, 0, fmt.Errorf("dtype %v", d)
	}
	var p unsafe.Pointer
	if n > 0 {
		p = v.UnsafePointer()
	}
	return p, n, dt, nil
}

// reducible is view for a reduction with op: float32, float64 or int64 (OpenMPI 4 has no
// 16-bit float reductions).
func (g *Group) reducible(b comm.Buffer, op comm.Op) (unsafe.Pointer, int, uintptr, error) {
	if op < comm.Sum || op > comm.Min {
		return nil, 0, 0, fmt.Errorf("unknown op %v", op)
	}
	p, n, dt, err := view(b)
	if err == nil && b.DType() != comm.Float32 && b.DType() != comm.Float64 && b.DType() != comm.Int64 {
		err = fmt.Errorf("dtype %v cannot be reduced by the MPI backend", b.DType())
	}
	return p, n, dt, err
}

func mpiOp(o comm.Op) uintptr {
	switch o {
	case comm.Max:
		return handles[hMax]
	case comm.Min:
		return handles[hMin]
	}
	return handles[hSum]
}

// divide turns a sum into an average; int64 truncates toward zero, as comm's Avg.
func divide(b comm.Buffer, n int) {
	switch v := b.(type) {
	case comm.F32:
		for i := range v {
			v[i] /= float32(n)
		}
	case comm.F64:
		for i := range v {
			v[i] /= float64(n)
		}
	case comm.I64:
		for i := range v {
			v[i] /= int64(n)
		}
	}
}

func overlap(a unsafe.Pointer, an int, b unsafe.Pointer, bn int) bool {
	x, y := uintptr(a), uintptr(b)
	return x < y+uintptr(bn) && y < x+uintptr(an)
}

// shardCounts returns every rank's shard length and offset (comm.ShardRange) as MPI ints.
func shardCounts(total, n int) (counts, displs []int32) {
	counts, displs = make([]int32, n), make([]int32, n)
	for r := range n {
		lo, hi := comm.ShardRange(total, n, r)
		counts[r], displs[r] = int32(hi-lo), int32(lo)
	}
	return counts, displs
}

func codeErr(call string, code int) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", call, mpiErr(code))
}
