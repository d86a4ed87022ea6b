package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

// Thread levels of MPI_Init_thread (the values of mpi.h).
const (
	ThreadSingle     = 0
	ThreadFunneled   = 1
	ThreadSerialized = 2
	ThreadMultiple   = 3
)

// Note [One MPI thread]: every MPI call of the package runs on one goroutine locked to its OS
// thread, the engine, which also called MPI_Init_thread. It posts the nonblocking calls it is
// handed and completes them with MPI_Testsome, which also drives OpenMPI's progress (libnbc's
// collective schedules advance only inside MPI calls). Funnelling through one thread is
// correct at any thread level OpenMPI provides (FUNNELED and up), keeps MPI's own locks
// uncontended, and lets point-to-point messages progress beside collectives without a
// blocking call ever holding the thread. MPI_THREAD_MULTIPLE is still requested, so that
// MPI_Abort can be called from a timer's goroutine when the engine is inside a blocking call
// (MPI_Finalize), and so that other libraries of the process may call MPI themselves; the
// level provided is logged and reported by ThreadLevel, and a lower one changes nothing here.
//
// The loop polls, as MPI_Wait does, while requests are pending, and backs off when polls
// complete nothing: it spins for idleSpin, then yields the CPU (sched_yield) until
// idleYield, then sleeps idleSleep between polls, so that a long wait (a peer still
// computing, a receive posted early) leaves the cores to the computation beside it (DDP's
// backward) at the cost of up to idleSleep of latency. Any completion resets the backoff.
const (
	idleSpin  = 20 * time.Microsecond
	idleYield = time.Millisecond
	idleSleep = 50 * time.Microsecond
)

// engine is the process's MPI thread (Note [One MPI thread]).
type engine struct {
	calls    chan func(*engine)
	provided int
	rank     int
	size     int
	tagUB    int
	version  string

	reqs  []uintptr // active requests, passed to MPI_Testsome
	owner []*op     // owner[i] posted reqs[i]
	idx   []int32
	st    []status
	stop  bool
}

var (
	engMu     sync.Mutex
	eng       *engine
	engGroups int  // groups open on eng
	finalized bool // MPI_Finalize ran: MPI cannot start again in this process
)

// startEngine initialises MPI on a new locked thread, once per process.
func startEngine() (*engine, error) {
	engMu.Lock()
	defer engMu.Unlock()
	if finalized {
		return nil, errors.New("mpi: MPI was finalized when the last group of this process closed; MPI cannot be initialised twice in one process")
	}
	if eng != nil {
		return eng, nil
	}
	if err := Load(); err != nil {
		return nil, err
	}
	// OpenMPI catches SIGSEGV, SIGBUS, SIGFPE and SIGILL to print its own backtrace, which
	// would take them from the Go runtime (nil dereferences become a crash without a Go
	// trace); opal_signal lists the signals it catches.
	if _, ok := os.LookupEnv("OMPI_MCA_opal_signal"); !ok {
		os.Setenv("OMPI_MCA_opal_signal", "")
	}
	e := &engine{calls: make(chan func(*engine), 1024)}
	ready := make(chan error, 1)
	go e.run(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	eng = e
	return e, nil
}

func (e *engine) run(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine after MPI_Finalize
	provided, code := mpiInit(ThreadMultiple)
	switch code {
	case 0:
	case -2:
		ready <- errors.New("mpi: MPI was initialised by another library of this process; the package needs to initialise it itself (on its own thread)")
		return
	default:
		ready <- fmt.Errorf("mpi: MPI_Init_thread: %s", mpiErr(code))
		return
	}
	world := handles[hCommWorld]
	rank, size, code := mpiRankSize(world)
	if code != 0 {
		ready <- fmt.Errorf("mpi: MPI_Comm_rank/size: %s", mpiErr(code))
		return
	}
	e.provided, e.rank, e.size, e.tagUB, e.version = provided, rank, size, mpiTagUB(world), mpiVersion()
	ready <- nil
	var idle time.Time // when polls started completing nothing; zero while they complete
	for !e.stop {
		if len(e.reqs) == 0 {
			f := <-e.calls
			f(e)
			continue
		}
	drain:
		for {
			select {
			case f := <-e.calls:
				f(e)
			default:
				break drain
			}
		}
		if e.poll() {
			idle = time.Time{}
			continue
		}
		if idle.IsZero() {
			idle = time.Now()
		}
		switch waited := time.Since(idle); {
		case waited < idleSpin:
		case waited < idleYield:
			mpiYield()
		default:
			time.Sleep(idleSleep)
		}
	}
}

// post runs o's MPI call and tracks its request; it fails o when posting fails.
func (e *engine) post(o *op) {
	req, err := o.post()
	if err != nil {
		o.complete(err)
		return
	}
	e.reqs = append(e.reqs, req)
	e.owner = append(e.owner, o)
}

// cancel asks MPI to cancel o's pending requests (receives only: OpenMPI cannot cancel a
// send once posted). They complete through poll, cancelled.
func (e *engine) cancel(o *op) {
	for i, r := range e.reqs {
		if e.owner[i] == o {
			mpiCancel(r)
		}
	}
}

// poll tests the active requests once and completes the ops whose requests all finished.
// It reports whether any request completed.
func (e *engine) poll() bool {
	n := len(e.reqs)
	if cap(e.idx) < n {
		e.idx, e.st = make([]int32, 2*n), make([]status, 2*n)
	}
	e.idx, e.st = e.idx[:n], e.st[:n]
	count, code := mpiTestsome(e.reqs, e.idx, e.st)
	if count <= 0 {
		if code != 0 {
			// An error not tied to one request: every pending operation has failed.
			err := fmt.Errorf("MPI_Testsome: %s", mpiErr(code))
			for _, o := range e.owner {
				o.complete(err)
			}
			e.reqs, e.owner = e.reqs[:0], e.owner[:0]
			return true
		}
		return false
	}
	for k := range count {
		i := e.idx[k]
		o := e.owner[i]
		s := statusAt(e.st, k)
		var err error
		if c := code; c != 0 {
			if c == mpiErrInStatus {
				c = s.errCode() // MPI_SUCCESS for the requests that did not fail
			}
			if c != 0 {
				err = errors.New(mpiErr(c))
			}
		}
		if err == nil && o.recvBytes >= 0 {
			switch {
			case s.wasCancelled():
				err = errCancelled
			case s.receivedBytes() != o.recvBytes:
				err = fmt.Errorf("%w: the message has %d bytes, the buffer %d", errInvalid, s.receivedBytes(), o.recvBytes)
			}
		}
		e.owner[i] = nil
		o.complete(err)
	}
	// Drop the completed requests (MPI set them to MPI_REQUEST_NULL).
	j := 0
	for i, o := range e.owner {
		if o != nil {
			e.reqs[j], e.owner[j] = e.reqs[i], o
			j++
		}
	}
	clear(e.owner[j:])
	e.reqs, e.owner = e.reqs[:j], e.owner[:j]
	return true
}

// do runs f on the engine's thread and waits for it, or for ctx.
func (e *engine) do(ctx context.Context, f func(*engine) error) error {
	res := make(chan error, 1)
	select {
	case e.calls <- func(e *engine) { res <- f(e) }:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// abort ends the job with MPI_Abort: directly when MPI allows calls from any thread, else on
// the engine's thread. It returns only if MPI_Abort returned (it should not).
func (e *engine) abort(code int) error {
	if e.provided == ThreadMultiple {
		return fmt.Errorf("MPI_Abort: %s", mpiErr(mpiAbort(handles[hCommWorld], code)))
	}
	res := make(chan int, 1)
	e.calls <- func(*engine) { res <- mpiAbort(handles[hCommWorld], code) }
	return fmt.Errorf("MPI_Abort: %s", mpiErr(<-res))
}

// mpiErrInStatus is OpenMPI's MPI_ERR_IN_STATUS: the statuses say which requests failed.
const mpiErrInStatus = 18

// mpiErr is an MPI error code's text.
func mpiErr(code int) string {
	if s := mpiErrorString(code); s != "" {
		return fmt.Sprintf("%s (MPI error %d)", s, code)
	}
	return fmt.Sprintf("MPI error %d", code)
}
