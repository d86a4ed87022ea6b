// Package nccl is the GPU backend of the process group: a comm.Group whose collectives run
// through NCCL on CUDA streams, so that DDP, ZeRO-3 and the sharded GradScaler run on GPUs
// unchanged. It lives apart from comm so that comm stays free of CUDA.
//
// Ranks meet through the rendezvous store: rank 0 makes the NCCL unique id and sets it in the
// store (store.Rendezvous or comm.StoreOf of a TCP group), the others get it and every rank
// joins with ncclCommInitRank on its device (LOCAL_RANK by default).
//
// comm.Group's buffers are host slices ([]float32, []float64, []int64): each operation copies
// the buffer into pinned host memory, then to the device, runs the NCCL collective on the
// group's stream and copies the result back, all on a worker goroutine; Work.Wait returns when
// the result is in the host buffer. Device-resident values (cuda execution) use the *Device
// methods, which skip the copies. Send and Recv run on two more communicators and workers
// (one per direction), beside the collectives, as comm requires. A collective that times out or whose Wait context ends
// aborts the communicator (ncclCommAbort) and poisons the group, as comm's TCP backend does.
//
// NCCL needs equal shards; ReduceScatter and AllGather over totals that Size() does not divide
// pad every shard to the largest on the device and unpack on the way back.
package nccl

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

// Option configures a Group.
type Option func(*config)

type config struct {
	device  int
	timeout time.Duration
	name    string
}

// WithDevice selects the CUDA device ordinal (default: LOCAL_RANK from launchenv.FromOS for
// InitFromEnv, else 0).
func WithDevice(ordinal int) Option { return func(c *config) { c.device = ordinal } }

// WithTimeout bounds each operation (default 30 minutes, as comm and torch).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithName distinguishes several NCCL groups created on one store (the store key of the
// unique id). All ranks use the same name.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// Group is a comm.Group over NCCL.
type Group struct {
	rank, size int
	dev        driver.Device
	ctx        driver.Context
	coll       *worker
	up, down   *worker // point-to-point: messages to higher ranks, messages to lower ranks

	mu     sync.Mutex
	closed bool
}

var _ comm.Group = (*Group)(nil)

var (
	idMu  sync.Mutex
	idSeq = map[*store.Store]int{}
)

// New joins rank of size to an NCCL group, exchanging unique ids through store. It blocks
// until every rank has joined (NCCL's init is collective) or ctx ends.
func New(ctx context.Context, st *store.Store, rank, size int, opts ...Option) (*Group, error) {
	cfg := config{timeout: 30 * time.Minute, name: "default"}
	for _, o := range opts {
		o(&cfg)
	}
	if st == nil || size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("nccl: rank %d of %d with store %v: %w", rank, size, st != nil, comm.ErrInvalid)
	}
	if err := driver.Load(); err != nil {
		return nil, fmt.Errorf("nccl: rank %d: %w", rank, err)
	}
	if err := libnccl.Load(); err != nil {
		return nil, fmt.Errorf("nccl: rank %d: %w", rank, err)
	}
	dev, err := driver.GetDevice(cfg.device)
	if err != nil {
		return nil, fmt.Errorf("nccl: rank %d: %w", rank, err)
	}
	cctx, err := dev.RetainPrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("nccl: rank %d: %w", rank, err)
	}
	idMu.Lock()
	seq := idSeq[st]
	idSeq[st]++
	idMu.Unlock()
	g := &Group{rank: rank, size: size, dev: dev, ctx: cctx}
	slots := []**worker{&g.coll, &g.up, &g.down}
	for i, kind := range []string{"coll", "up", "down"} {
		key := "nccl/" + cfg.name + "/" + strconv.Itoa(seq) + "/" + kind
		id, err := exchangeID(ctx, st, key, rank)
		if err == nil {
			var w *worker
			w, err = newWorker(ctx, g, id, cfg.timeout, kind)
			*slots[i] = w
		}
		if err != nil {
			for _, w := range []*worker{g.coll, g.up, g.down} {
				if w != nil {
					w.abort(fmt.Errorf("nccl: rank %d: group creation failed: %w", rank, comm.ErrAborted))
					_ = w.close(context.Background())
				}
			}
			g.release()
			return nil, fmt.Errorf("nccl: rank %d of %d on device %d: %w", rank, size, cfg.device, err)
		}
	}
	return g, nil
}

// InitFromEnv builds an NCCL group from the torchrun environment (launchenv.FromOS and
// store.Rendezvous), on device LOCAL_RANK unless WithDevice says otherwise.
func InitFromEnv(ctx context.Context, opts ...Option) (*Group, error) {
	env, err := launchenv.FromOS()
	if err != nil {
		return nil, fmt.Errorf("nccl: %w", err)
	}
	st, err := store.Rendezvous(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("nccl: rank %d: rendezvous: %w", env.Rank, err)
	}
	g, err := New(ctx, st, env.Rank, env.WorldSize, append([]Option{WithDevice(env.LocalRank)}, opts...)...)
	if err != nil {
		st.Close()
		return nil, err
	}
	return g, nil
}

func exchangeID(ctx context.Context, st *store.Store, key string, rank int) (libnccl.UniqueID, error) {
	var id libnccl.UniqueID
	if rank == 0 {
		var err error
		if id, err = libnccl.GetUniqueID(); err != nil {
			return id, err
		}
		if err := st.Set(ctx, key, []byte(hex.EncodeToString(id[:]))); err != nil {
			return id, fmt.Errorf("store set %s: %w", key, err)
		}
		return id, nil
	}
	v, err := st.Get(ctx, key)
	if err != nil {
		return id, fmt.Errorf("store get %s: %w", key, err)
	}
	if n, err := hex.Decode(id[:], v); err != nil || n != len(id) {
		return id, fmt.Errorf("store key %s: malformed NCCL unique id (%d bytes): %v", key, len(v), err)
	}
	return id, nil
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.size }

// Context is the CUDA context of the group's device, for device-resident buffers.
func (g *Group) Context() driver.Context { return g.ctx }

// AllReduce reduces buf over all ranks in place.
func (g *Group) AllReduce(buf comm.Buffer, op comm.Op) comm.Work {
	return g.coll.submit(&task{kind: kAllReduce, buf: buf, op: op})
}

// Broadcast copies root's buf to every rank.
func (g *Group) Broadcast(buf comm.Buffer, root int) comm.Work {
	return g.coll.submit(&task{kind: kBroadcast, buf: buf, root: root})
}

// AllGather concatenates the ranks' src shards into dst (see comm.ShardRange).
func (g *Group) AllGather(dst, src comm.Buffer) comm.Work {
	return g.coll.submit(&task{kind: kAllGather, buf: dst, src: src})
}

// ReduceScatter reduces src over all ranks and leaves this rank's shard in dst.
func (g *Group) ReduceScatter(dst, src comm.Buffer, op comm.Op) comm.Work {
	return g.coll.submit(&task{kind: kReduceScatter, buf: dst, src: src, op: op})
}

// Barrier completes once every rank has entered it (a one-element all-reduce).
func (g *Group) Barrier() comm.Work { return g.coll.submit(&task{kind: kBarrier}) }

// Send sends buf to peer. NCCL matches point-to-point messages in order per peer; tag is
// checked to be >= 0 but not sent. Messages to higher ranks and to lower ranks travel on two
// communicators with their own streams and workers, so that two ranks that each post a Recv
// before their Send (a pairwise exchange) do not wait on each other.
func (g *Group) Send(buf comm.Buffer, peer int, tag int) comm.Work {
	return g.p2pWorker(g.rank, peer).submit(&task{kind: kSend, buf: buf, root: peer, tag: tag})
}

// Recv receives the next message from peer into buf.
func (g *Group) Recv(buf comm.Buffer, peer int, tag int) comm.Work {
	return g.p2pWorker(peer, g.rank).submit(&task{kind: kRecv, buf: buf, root: peer, tag: tag})
}

// p2pWorker is the worker of messages from rank from to rank to.
func (g *Group) p2pWorker(from, to int) *worker {
	if from < to {
		return g.up
	}
	return g.down
}

// AllReduceDevice all-reduces n elements of type dt at device address p in place, on the
// group's stream; the Work completes when the stream has run it.
func (g *Group) AllReduceDevice(p driver.DevPtr, n int, dt libnccl.DataType, op comm.Op) comm.Work {
	return g.coll.submit(&task{kind: kAllReduce, dev: p, devN: n, devType: dt, op: op})
}

// DeviceWork is a collective on device memory ordered by CUDA events (AllReduceDeviceAfter).
// Done and Wait are comm.Work's: the group's stream has run the collective (or it failed).
type DeviceWork interface {
	comm.Work
	// Enqueued is closed once the collective, and the record of its done event, are on the
	// group's stream (or the operation failed before: Wait then says why). A consumer
	// stream may then wait on the done event, with no host wait for the collective.
	Enqueued() <-chan struct{}
}

// FailedDeviceWork is a DeviceWork that failed before it was issued: Done and Enqueued are
// closed, and Wait returns err. Callers that keep one DeviceWork per bucket or unit use it
// where the collective could not be issued (an event that could not be recorded).
func FailedDeviceWork(err error) DeviceWork { return failedWork{comm.Failed(err)} }

type failedWork struct{ comm.Work }

func (w failedWork) Enqueued() <-chan struct{} { return w.Done() }

// StreamWait makes stream s of context c wait for w, a collective (what, for the errors)
// whose end records done: it waits on the host only until w is enqueued, then queues the
// event wait on s. It returns ctx's error if ctx ends first.
func StreamWait(ctx context.Context, c driver.Context, s driver.Stream, w DeviceWork, done driver.Event, what string) error {
	select {
	case <-w.Enqueued():
	case <-ctx.Done():
		return fmt.Errorf("waiting for the %s to be enqueued: %w", what, ctx.Err())
	}
	if err := c.StreamWaitEvent(s, done); err != nil {
		return fmt.Errorf("waiting for the %s: %w", what, err)
	}
	return nil
}

// AllReduceDeviceAfter all-reduces n elements of type dt at device address p in place, on
// the group's stream, ordered by events instead of host waits: the group's stream first
// waits for wait (recorded by the caller on its compute stream once the data is final; 0
// for none), and records done after the collective (0 for none), so that the caller's
// stream can wait for the result with cuStreamWaitEvent once Enqueued is closed. Collectives
// are issued in call order with the group's others, as comm requires.
func (g *Group) AllReduceDeviceAfter(p driver.DevPtr, n int, dt libnccl.DataType, op comm.Op, wait, done driver.Event) DeviceWork {
	o := &task{kind: kAllReduce, dev: p, devN: n, devType: dt, op: op, waitEv: wait, doneEv: done, enq: make(chan struct{})}
	g.coll.submit(o)
	return o
}

// Close waits for queued operations, then destroys the communicators and releases the
// device. Operations issued after Close fail with comm.ErrClosed.
func (g *Group) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	err := errors.Join(g.coll.close(ctx), g.up.close(ctx), g.down.close(ctx))
	g.release()
	return err
}

func (g *Group) release() {
	_ = g.dev.ReleasePrimaryContext()
}
