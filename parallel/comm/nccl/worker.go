package nccl

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

type kind uint8

const (
	kAllReduce kind = iota + 1
	kBroadcast
	kAllGather
	kReduceScatter
	kBarrier
	kSend
	kRecv
)

var kindNames = [...]string{"", "all-reduce", "broadcast", "all-gather", "reduce-scatter", "barrier", "send", "recv"}

// task is one queued operation and its Work.
type task struct {
	kind     kind
	buf, src comm.Buffer
	op       comm.Op
	root     int // broadcast root or point-to-point peer
	tag      int
	dev      driver.DevPtr // device-resident collective when not 0 (the all-reduce's buffer, the destination otherwise)
	devSrc   driver.DevPtr // device all-gather and reduce-scatter: the source
	devN     int
	devType  libnccl.DataType
	seq      uint64
	w        *worker
	done     chan struct{}
	err      error
	waitEv   driver.Event  // device collective: the group's stream waits for it first
	doneEv   driver.Event  // device collective: recorded on the group's stream after it
	enq      chan struct{} // AllReduceDeviceAfter: closed once enqueued (or failed)
	enqOnce  sync.Once
}

// Enqueued is closed once the operation is on the group's stream, or has failed.
func (o *task) Enqueued() <-chan struct{} { return o.enq }

// enqueued closes enq (once), for tasks that have it.
func (o *task) enqueued() {
	if o.enq != nil {
		o.enqOnce.Do(func() { close(o.enq) })
	}
}

// finish completes the operation: Enqueued, then Done.
func (o *task) finish() {
	o.enqueued()
	close(o.done)
}

// Done is closed when the operation has completed.
func (o *task) Done() <-chan struct{} { return o.done }

// Wait blocks until the operation completes. When ctx ends first the communicator is aborted,
// the group poisoned, and Wait returns once the buffers are no longer in use.
func (o *task) Wait(ctx context.Context) error {
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
	o.w.abort(fmt.Errorf("%s: cancelled by caller: %w: %w", o.describe(), comm.ErrAborted, ctx.Err()))
	<-o.done
	return o.err
}

func (o *task) describe() string {
	return fmt.Sprintf("rank %d: nccl %s seq %d", o.w.g.rank, kindNames[o.kind], o.seq)
}

// worker runs the operations of one communicator in issue order, on its own locked OS thread
// with the device's context current, keeping several device collectives in flight (Note
// [Collectives in flight]).
type worker struct {
	g       *Group
	name    string
	comm    libnccl.Comm
	stream  driver.Stream
	timeout time.Duration
	queue   chan *task
	exited  chan struct{}
	abandon chan struct{} // closed when New gave up waiting for the communicator's init

	// qmu orders submissions and Close's closing of queue; the worker never takes it, so a
	// submit blocked on a full queue cannot stall the worker.
	qmu     sync.Mutex
	qclosed bool

	mu      sync.Mutex
	poison  error
	aborted bool
	seq     uint64 // under qmu

	flight []flight       // device collectives issued, oldest first (inflight.go)
	events []driver.Event // every completion event made
	free   []driver.Event // completion events not in flight

	host     []byte // pinned staging
	hostPtr  unsafe.Pointer
	dev      driver.DevPtr
	devBytes int
}

func newWorker(ctx context.Context, g *Group, id libnccl.UniqueID, timeout time.Duration, name string) (*worker, error) {
	w := &worker{g: g, name: name, timeout: timeout, queue: make(chan *task, 1024), exited: make(chan struct{}),
		abandon: make(chan struct{})}
	initDone := make(chan error, 1)
	go w.run(id, initDone)
	select {
	case err := <-initDone:
		if err != nil {
			return nil, err
		}
		return w, nil
	case <-ctx.Done():
		// ncclCommInitRank is blocked waiting for peers; the worker frees what it made once
		// init returns.
		close(w.abandon)
		return nil, fmt.Errorf("%s communicator init: %w: %w", name, comm.ErrTimeout, ctx.Err())
	}
}

func (w *worker) run(id libnccl.UniqueID, initDone chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(w.exited)
	c := w.g.ctx
	err := c.MakeCurrent()
	if err == nil {
		w.stream, err = c.StreamCreate()
	}
	if err == nil {
		w.comm, err = libnccl.CommInitRank(w.g.size, id, w.g.rank)
	}
	initDone <- err
	if err != nil {
		return
	}
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	sleep := time.Microsecond // between looks at the oldest collective in flight
	for {
		var o *task
		ok := true
		switch {
		case len(w.flight) == 0:
			select {
			case <-w.abandon:
				w.mu.Lock()
				w.aborted = true
				w.mu.Unlock()
				_ = w.comm.Abort()
				_ = c.StreamDestroy(w.stream)
				return
			case o, ok = <-w.queue:
			}
		case len(w.flight) < maxInFlight: // Note [Collectives in flight] (inflight.go)
			select {
			case o, ok = <-w.queue:
			default:
				if w.retireHead() {
					sleep = time.Microsecond
					continue
				}
				wake.Reset(sleep)
				select {
				case o, ok = <-w.queue:
					wake.Stop()
				case <-wake.C:
					sleep = min(2*sleep, 200*time.Microsecond)
					continue
				}
			}
		default:
			if w.retireHead() {
				sleep = time.Microsecond
			} else {
				time.Sleep(sleep)
				sleep = min(2*sleep, 200*time.Microsecond)
			}
			continue
		}
		if !ok {
			w.land()
			w.destroyEvents()
			w.freeStaging()
			_ = c.StreamDestroy(w.stream)
			if !w.isAborted() {
				_ = w.comm.Destroy()
			}
			return
		}
		w.start(o)
		sleep = time.Microsecond // a new collective: look again soon
	}
}

func (w *worker) submit(o *task) comm.Work {
	o.w = w
	o.done = make(chan struct{})
	w.qmu.Lock()
	defer w.qmu.Unlock()
	w.seq++
	o.seq = w.seq
	if w.qclosed {
		o.err = fmt.Errorf("%s: %w", o.describe(), comm.ErrClosed)
		o.finish()
		return o
	}
	if err := w.validate(o); err != nil {
		o.err = fmt.Errorf("%s: %w", o.describe(), err)
		o.finish()
		return o
	}
	w.queue <- o
	return o
}

func (w *worker) poisoned() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.poison
}

func (w *worker) setPoison(err error) {
	w.mu.Lock()
	if w.poison == nil {
		w.poison = err
	}
	w.mu.Unlock()
}

func (w *worker) isAborted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.aborted
}

// abort poisons the worker and aborts its communicator, which ends the operation in flight
// (on every rank).
func (w *worker) abort(err error) {
	w.mu.Lock()
	if w.poison == nil {
		w.poison = err
	}
	first := !w.aborted
	w.aborted = true
	w.mu.Unlock()
	if first {
		_ = w.comm.Abort()
	}
}

func (w *worker) close(ctx context.Context) error {
	w.qmu.Lock()
	if !w.qclosed {
		w.qclosed = true
		close(w.queue)
	}
	w.qmu.Unlock()
	select {
	case <-w.exited:
		return nil
	case <-ctx.Done():
		w.abort(fmt.Errorf("rank %d: nccl close: %w", w.g.rank, comm.ErrAborted))
		<-w.exited
		return fmt.Errorf("rank %d: nccl close: %w", w.g.rank, ctx.Err())
	}
}

// wait polls the stream until the enqueued work has run, the timeout passes (abort) or an
// asynchronous NCCL error appears.
func (w *worker) wait(o *task) error {
	deadline := time.Now().Add(w.timeout)
	sleep := time.Microsecond
	for i := 0; ; i++ {
		ok, err := w.g.ctx.StreamQuery(w.stream)
		if err != nil {
			return err
		}
		if ok {
			// A failed or aborted collective also ends its stream's work: the result is
			// valid only when the communicator reports no error.
			if err := w.comm.AsyncError(); err != nil {
				w.abort(err)
				return err
			}
			return w.poisoned()
		}
		if perr := w.poisoned(); perr != nil {
			return perr
		}
		if i%64 == 63 {
			if err := w.comm.AsyncError(); err != nil {
				w.abort(err)
				return err
			}
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("%s: %w after %v", o.describe(), comm.ErrTimeout, w.timeout)
			w.abort(err)
			return err
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, 200*time.Microsecond)
	}
}
