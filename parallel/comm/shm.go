//go:build linux

package comm

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

// NewSHMGroup connects rank to the other size-1 ranks, which must run on the same host: data
// streams are single-producer/single-consumer rings in shared memory (/dev/shm), and every
// pair of ranks still shares one TCP control connection (point-to-point messages, aborts,
// leave notices, and the detection of a peer whose process died). The ring files are
// unlinked as soon as every rank has mapped them, so nothing is left behind when a process
// is killed. All ranks must pass the same options. InitFromEnv selects this transport by
// itself when all ranks share the host (see WithTransport).
func NewSHMGroup(ctx context.Context, st *store.Store, rank, size int, opts ...Option) (Group, error) {
	cfg := newConfig(opts)
	t, err := dialSHM(ctx, st, rank, size, cfg, true)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	return newGroup(t, cfg), nil
}

// Ring layout. Every ring has a control page (the producer's head, the consumer's tail and
// the two wait words, each on its own cache line pair) followed by capacity bytes of data.
// head and tail count bytes since the start and stay multiples of 8, so payloads start
// 8-aligned and every piece handed to a reduction holds whole elements.
const (
	shmCtl      = 4096
	shmHeadOff  = 0
	shmTailOff  = 128
	shmCWaitOff = 256 // consumer sleeps here waiting for data
	shmPWaitOff = 384 // producer sleeps here waiting for space
	// shmPiece bounds the bytes a producer publishes at once, so the consumer starts on a
	// frame (copying or reducing) while the rest is still being written.
	shmPiece = 256 << 10
	// shmDefaultRing is the data capacity of one ring: small enough that a ring's working
	// set stays in the last-level cache, so bytes cross between cores without reaching DRAM.
	shmDefaultRing = 1 << 20
	shmDir         = "/dev/shm"
	shmFilePrefix  = "gp-comm-"
)

type shmRing struct {
	head, tail     *uint64
	cwait, pwait   *uint32
	data           []byte
	capacity, mask uint64
	pos            uint64 // the owner's cursor: head for the producer, tail for the consumer
	// peer is the rank at the ring's other end; waitID names this rank's wait word of the
	// ring (cwait for a ring it consumes, pwait for one it produces into) among its bells,
	// wakeID the peer's word among the peer's (see shmBells).
	peer, waitID, wakeID int
}

func newSHMRing(mem []byte) *shmRing {
	r := &shmRing{
		head:  (*uint64)(unsafe.Pointer(&mem[shmHeadOff])),
		tail:  (*uint64)(unsafe.Pointer(&mem[shmTailOff])),
		cwait: (*uint32)(unsafe.Pointer(&mem[shmCWaitOff])),
		pwait: (*uint32)(unsafe.Pointer(&mem[shmPWaitOff])),
		data:  mem[shmCtl:],
	}
	r.capacity = uint64(len(r.data))
	r.mask = r.capacity - 1
	return r
}

type shmTransport struct {
	*tcpTransport // control plane: SendMsg/RecvMsg, abort notices, peer death, leave notices
	k             int
	in, out       [][]*shmRing // [peer][stream]; in: rings this rank consumes, out: produces into
	maps          [][]byte
	smallBytes    int // frames up to this size wait with OS yields (see wait)

	stages     []*shmStage  // [rank]: every rank's staging area (shmstage.go)
	own        *shmStage    // this rank's
	slotBytes  int          // bytes per staging slot
	staged     uint64       // chunks staged so far, identical on every rank
	stageTmp   []byte       // reduceN's block accumulator
	regions    []*shmRegion // shared buffers, by index (shmzero.go)
	regMu      sync.RWMutex // guards regions against AllocFloat32 beside a running collective
	zeroCopies atomic.Int64 // all-reduces that took the zero-copy path (for tests)
	// zeroCopyReduced, when set (tests only), runs after this rank has reduced its slice of a
	// zero-copy all-reduce and before it says so; an error ends the all-reduce there.
	zeroCopyReduced func() error

	bells shmBells

	raceToken byte // see shm_race.go
	aborted   atomic.Bool
	mu        sync.RWMutex // guards the mappings against a late abort during Close
	unmapped  bool
}

func round8(n uint64) uint64 { return (n + 7) &^ 7 }

// wait returns once ready() holds, or fails when the transport aborts. It spins briefly
// (a frame usually follows within microseconds), then yields, then sleeps until the other
// side, after publishing, rings this rank's bell for word (id names word among the bells;
// see shmBells). The sleep is bounded, so even a lost wake-up only delays; aborts wake every
// waiter at once.
//
// The sleep parks the goroutine on a channel, fed by the goroutine that reads the bell
// through the netpoller, so a rank's only P (GOMAXPROCS=1) goes on running the compute while
// the communication waits. A futex wait held the P in the system call until the runtime's
// monitor took it back (20 µs to 10 ms later), and the compute stood still meanwhile: 3-9 ms
// a resnet18 step in Go execution traces of bench/ddp.
//
// small says the frame waited for is a small one (at most the small-message threshold):
// then each yield, after runtime.Gosched has let this process's own goroutines run, also
// yields the thread to the operating system (sched_yield), so that with more ranks than
// cores the peer process about to publish gets the core at once. Measured on two cores: a
// 4 KiB all-reduce is about 30% faster at world 2 and 4 (64-256 KiB at world 4 about 45%).
// Large frames (ring chunks) keep runtime.Gosched alone: OS yields slowed large messages
// down, and a sched_yield without the Gosched first, which holds this process's P, made the
// 64-256 KiB all-reduce at world 4 about five times slower.
func (t *shmTransport) wait(word *uint32, id int, small bool, ready func() bool) error {
	for i := 0; ; i++ {
		if ready() {
			return nil
		}
		if t.aborted.Load() {
			return t.tcpTransport.err
		}
		switch {
		case i < shmSpin:
		case i < shmSpin+shmYield:
			runtime.Gosched()
			if small && !ready() {
				osYield()
			}
		default:
			ch := t.bells.waiters[id]
			select { // a ring that came after an earlier sleep had timed out
			case <-ch:
			default:
			}
			atomic.StoreUint32(word, 1)
			if ready() {
				atomic.StoreUint32(word, 0)
				return nil
			}
			if t.aborted.Load() {
				return t.tcpTransport.err
			}
			tm := time.NewTimer(shmSleep)
			select {
			case <-ch:
			case <-tm.C:
			}
			tm.Stop()
		}
	}
}

const (
	shmSpin  = 200
	shmYield = 50
	shmSleep = 50 * time.Millisecond // the longest sleep before checking again
)

// wake rings peer's bell for its word id when the peer sleeps on word.
func (t *shmTransport) wake(word *uint32, peer, id int) {
	if atomic.LoadUint32(word) != 0 && atomic.SwapUint32(word, 0) != 0 {
		t.bells.ring(peer, id)
	}
}

// write appends src to the ring, waiting for space; the last piece is padded to 8 bytes.
func (t *shmTransport) write(r *shmRing, small bool, src []byte) error {
	for len(src) > 0 {
		var free uint64
		if err := t.wait(r.pwait, r.waitID, small, func() bool {
			free = r.capacity - (r.pos - atomic.LoadUint64(r.tail))
			return free > 0
		}); err != nil {
			return err
		}
		off := r.pos & r.mask
		n := min(free, r.capacity-off, uint64(len(src)), shmPiece)
		copy(r.data[off:off+n], src[:n])
		src = src[n:]
		r.pos += round8(n)
		t.raceRelease()
		atomic.StoreUint64(r.head, r.pos)
		t.wake(r.cwait, r.peer, r.wakeID)
	}
	return nil
}

// read consumes n bytes of the ring, handing them to fn in place as they become available
// (several pieces when the frame wraps or is still being written).
func (t *shmTransport) read(r *shmRing, small bool, n int, fn func(off int, p []byte)) error {
	for done := 0; done < n; {
		var avail uint64
		if err := t.wait(r.cwait, r.waitID, small, func() bool {
			avail = atomic.LoadUint64(r.head) - r.pos
			return avail > 0
		}); err != nil {
			return err
		}
		t.raceAcquire()
		off := r.pos & r.mask
		m := min(avail, r.capacity-off, uint64(n-done))
		fn(done, r.data[off:off+m])
		done += int(m)
		r.pos += round8(m)
		atomic.StoreUint64(r.tail, r.pos)
		t.wake(r.pwait, r.peer, r.wakeID)
	}
	return nil
}

func (t *shmTransport) Streams() int { return t.k }

func (t *shmTransport) Send(peer, s int, h *Header, b []byte) error {
	if t.aborted.Load() {
		return t.tcpTransport.err
	}
	r := t.out[peer][s]
	var hdr [headerSize]byte
	hh := *h
	hh.Len = uint32(len(b))
	hh.put(hdr[:])
	small := len(b) <= t.smallBytes
	if err := t.write(r, small, hdr[:]); err != nil {
		return err
	}
	return t.write(r, small, b)
}

func (t *shmTransport) Recv(peer, s int, h *Header, b []byte) error {
	return t.RecvView(peer, s, h, len(b), nil, func(off int, p []byte) { copy(b[off:], p) })
}

// RecvView receives one frame of n payload bytes from peer on stream s and hands the payload
// to fn in place, in order, in pieces of whole 8-byte words (but the last): the ring reduces
// straight out of shared memory instead of copying first. check, when non-nil, vets the
// header before any payload is consumed.
func (t *shmTransport) RecvView(peer, s int, h *Header, n int, check func(*Header) error, fn func(off int, p []byte)) error {
	if t.aborted.Load() {
		return t.tcpTransport.err
	}
	r := t.in[peer][s]
	var hdr [headerSize]byte
	small := n <= t.smallBytes // the expected frame's size: the header's wait is as the payload's
	if err := t.read(r, small, headerSize, func(off int, p []byte) { copy(hdr[off:], p) }); err != nil {
		return err
	}
	if err := vetFrame(h, hdr[:], n, check); err != nil {
		return err
	}
	return t.read(r, small, n, fn)
}

// wakeAll runs when the transport aborts (the control plane's hook): pending waits return.
func (t *shmTransport) wakeAll() {
	t.aborted.Store(true)
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.unmapped {
		return
	}
	for _, ch := range t.bells.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (t *shmTransport) Close(ctx context.Context) error {
	err := t.tcpTransport.Close(ctx)
	t.unmap()
	return err
}

func (t *shmTransport) unmap() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.unmapped {
		return
	}
	t.unmapped = true
	for _, m := range t.maps {
		syscall.Munmap(m)
	}
	t.maps = nil
	t.bells.close()
}

// dialSHM sets up the rings through the store, then the TCP control connections. Each rank
// creates one file holding the rings it consumes (one per peer and stream) and publishes its
// name; every rank maps every peer's file and reports whether it could; each file is
// unlinked once all ranks have reported. The ranks agree: shared memory is used only when
// every rank created and mapped everything. Otherwise, with required, it is an error naming
// the rank and the reason; without, the ranks fall back to TCP together (returned as a
// *tcpTransport).
func dialSHM(ctx context.Context, st *store.Store, rank, size int, cfg config, required bool) (Transport, error) {
	if size == 1 {
		return dialTCP(ctx, st, rank, size, cfg)
	}
	t, problem, err := shmRings(ctx, st, "", rank, size, cfg)
	if err != nil {
		return nil, err
	}
	if problem != nil {
		if required {
			return nil, fmt.Errorf("shared-memory transport: %w", problem)
		}
		cfg.logger.Debug("comm: shared memory unavailable, using TCP", "rank", rank, "reason", problem)
		return dialTCP(ctx, st, rank, size, cfg)
	}
	ccfg := cfg
	ccfg.streams = 0 // control connections only
	ccfg.onAbort = func(error) { t.wakeAll() }
	tt, err := dialTCP(ctx, st, rank, size, ccfg)
	if err != nil {
		t.unmap()
		return nil, err
	}
	t.tcpTransport = tt
	return t, nil
}

// shmRings maps the rings and staging areas of size ranks (see dialSHM), with store keys
// under ns (several groups of ranks, one per host, share one store in a hierarchical group).
// problem, when not nil, is why shared memory cannot be used; every rank gets the same
// verdict. The transport returned has no control plane yet (tcpTransport is nil).
func shmRings(ctx context.Context, st *store.Store, ns string, rank, size int, cfg config) (_ *shmTransport, problem, _ error) {
	cctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
	defer cancel()
	k := cfg.streams
	gen, err := st.Add(cctx, "comm/shmgen/"+ns+strconv.Itoa(rank), 1)
	if err != nil {
		return nil, nil, err
	}
	prefix := fmt.Sprintf("comm/shm%d/%s", gen, ns)
	t := &shmTransport{k: k, in: make([][]*shmRing, size), out: make([][]*shmRing, size), smallBytes: cfg.smallBytes}
	for p := range size {
		t.in[p], t.out[p] = make([]*shmRing, k), make([]*shmRing, k)
	}
	slot := func(from, to int) int { // ring index of from's streams in to's file
		if from < to {
			return from * k
		}
		return (from - 1) * k
	}
	ring := cfg.shmRingBytes
	if ring == 0 {
		ring = shmDefaultRing
	}
	slotBytes := stageSlotBytes(cfg)
	ringsSize := (size - 1) * k * (shmCtl + ring)
	fileSize := ringsSize
	staging := size >= stagedMinWorld
	if staging {
		fileSize += stageBytes(slotBytes)
	}
	t.stages, t.slotBytes, t.stageTmp = make([]*shmStage, size), slotBytes, make([]byte, 4096)

	// Phase 1: create and publish this rank's file (or why it could not).
	name, mem, cerr := createSHM(fileSize)
	unlinked := false
	unlink := func() {
		if name != "" && !unlinked {
			syscall.Unlink(name)
			unlinked = true
		}
		t.bells.unlink()
	}
	defer unlink()
	fail := func(err error) (*shmTransport, error, error) {
		t.unmap()
		return nil, nil, err
	}
	if cerr == nil {
		t.maps = append(t.maps, mem)
		cerr = t.bells.create(bellName(name), size, k)
	}
	if cerr == nil {
		if staging {
			t.stages[rank] = newSHMStage(mem[ringsSize:], slotBytes)
			t.own = t.stages[rank]
		}
		for p := range size {
			if p != rank {
				for s := range k {
					i := slot(p, rank) + s
					r := newSHMRing(mem[i*(shmCtl+ring) : (i+1)*(shmCtl+ring)])
					r.peer, r.waitID, r.wakeID = p, ringWaitID(k, p, s), producerWaitID(size, k, rank, s)
					t.in[p][s] = r
				}
			}
		}
	}
	pub := []byte(name)
	if cerr != nil {
		pub = []byte("!" + cerr.Error())
	}
	if err := st.Set(cctx, prefix+"file/"+strconv.Itoa(rank), pub); err != nil {
		return fail(err)
	}
	// Phase 2: map the peers' files and report.
	if cerr != nil {
		problem = fmt.Errorf("rank %d: %w", rank, cerr)
	}
	var missing []int
	var lastErr error
	for p := range size {
		if p == rank {
			continue
		}
		v, err := st.Get(cctx, prefix+"file/"+strconv.Itoa(p))
		if err != nil {
			missing, lastErr = append(missing, p), err
			continue
		}
		if problem != nil {
			continue
		}
		if len(v) > 0 && v[0] == '!' {
			problem = fmt.Errorf("rank %d: %s", p, v[1:])
			continue
		}
		pm, err := openSHM(string(v), fileSize)
		if err != nil {
			problem = fmt.Errorf("rank %d cannot map rank %d's file (not on the same host?): %w", rank, p, err)
			continue
		}
		t.maps = append(t.maps, pm)
		if err := t.bells.open(p, bellName(string(v))); err != nil {
			problem = fmt.Errorf("rank %d: %w", rank, err)
			continue
		}
		if staging {
			t.stages[p] = newSHMStage(pm[ringsSize:], slotBytes)
		}
		for s := range k {
			i := slot(rank, p) + s
			r := newSHMRing(pm[i*(shmCtl+ring) : (i+1)*(shmCtl+ring)])
			r.peer, r.waitID, r.wakeID = p, producerWaitID(size, k, p, s), ringWaitID(k, rank, s)
			t.out[p][s] = r
		}
	}
	if len(missing) > 0 {
		return fail(fmt.Errorf("ranks %v did not connect (no shared-memory file published): %w", missing, lastErr))
	}
	rep := []byte{}
	if problem != nil {
		rep = []byte(problem.Error())
	}
	if err := st.Set(cctx, prefix+"mapped/"+strconv.Itoa(rank), rep); err != nil {
		return fail(err)
	}
	for p := range size {
		if p == rank {
			continue
		}
		v, err := st.Get(cctx, prefix+"mapped/"+strconv.Itoa(p))
		if err != nil {
			return fail(fmt.Errorf("waiting for rank %d to map the shared memory: %w", p, err))
		}
		if problem == nil && len(v) > 0 {
			problem = fmt.Errorf("%s", v)
		}
	}
	unlink() // every rank has mapped it (or given up): the memory lives as long as a mapping
	if problem != nil {
		t.unmap()
		return nil, problem, nil
	}
	return t, nil, nil
}

// createSHM creates a fresh file of size bytes under /dev/shm and maps it. Its pages are
// allocated up front (fallocate), so a full /dev/shm fails here instead of with SIGBUS later.
func createSHM(size int) (string, []byte, error) {
	var rnd [8]byte
	if _, err := readRandom(rnd[:]); err != nil {
		return "", nil, err
	}
	name := fmt.Sprintf("%s/%s%d-%x", shmDir, shmFilePrefix, os.Getpid(), rnd)
	fd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("creating %s: %w", name, err)
	}
	defer syscall.Close(fd)
	if err := syscall.Fallocate(fd, 0, 0, int64(size)); err != nil {
		syscall.Unlink(name)
		return "", nil, fmt.Errorf("allocating %s in %s: %w", humanBytes(size), shmDir, err)
	}
	mem, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Unlink(name)
		return "", nil, fmt.Errorf("mapping %s: %w", name, err)
	}
	return name, mem, nil
}

func openSHM(name string, size int) ([]byte, error) {
	fd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	var stt syscall.Stat_t
	if err := syscall.Fstat(fd, &stt); err != nil {
		return nil, err
	}
	if stt.Size != int64(size) {
		return nil, fmt.Errorf("%w: %s has %d bytes, want %d (streams or ring size differ across ranks)", ErrMismatch, name, stt.Size, size)
	}
	return syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

// bellName is the name of the bell that goes with the ring file name (see shmBells).
func bellName(name string) string { return name + "-bell" }

// osYield gives the core to another thread of any process (sched_yield).
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

func readRandom(b []byte) (int, error) { return rand.Read(b) }

var (
	_ viewRecver  = (*shmTransport)(nil)
	_ stagedComms = (*shmTransport)(nil)
)

// dialLocalSHM maps the rings among the size ranks of one host of a hierarchical group
// (store keys under ns). Its control plane is the whole group's: the transport returned has
// none of its own and fails only when aborted (by the group, or by the TCP transport's
// abort hook). problem says why shared memory cannot be used (the host's ranks agree).
func dialLocalSHM(ctx context.Context, st *store.Store, ns string, rank, size int, cfg config) (_ Transport, problem, _ error) {
	t, problem, err := shmRings(ctx, st, ns, rank, size, cfg)
	if err != nil || problem != nil {
		return nil, problem, err
	}
	t.tcpTransport = &tcpTransport{rank: rank, size: size, logger: cfg.logger,
		ctrl: make([]*ctrlConn, size), data: make([][]*dataConn, size), abort: make(chan struct{}),
		onAbort: func(error) { t.wakeAll() }}
	return t, nil, nil
}
