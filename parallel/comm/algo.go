package comm

import (
	"errors"
	"fmt"
	"sync"
)

// run executes one collective and returns the name of the algorithm it chose.
func (g *group) run(w *work) (string, error) {
	h := Header{Kind: uint8(w.kind), Op: uint8(w.op), Seq: w.seq}
	if w.buf != nil {
		h.DType = uint8(w.buf.DType())
		h.Count = uint64(w.buf.Len())
	}
	if w.kind == kindReduceScatter {
		h.Count = uint64(w.src.Len())
	}
	if g.hier != nil && w.kind != kindBarrier {
		return "hier", g.hier.run(g, w, &h)
	}
	n := g.size
	switch w.kind {
	case kindBarrier:
		return "dissemination", g.barrier(&h)
	case kindAllReduce:
		b := w.buf.bytes()
		if n == 1 {
			break
		}
		var err error
		algo := "ring"
		sc, staged := g.t.(stagedComms)
		if len(b)*(n-1) <= g.cfg.smallBytes || w.buf.Len() < n {
			algo = "direct"
			err = g.directAllReduce(&h, w.buf.DType(), w.op, b)
		} else if staged && n >= stagedMinWorld {
			algo = "staged"
			var zero bool
			if zero, err = sc.stagedAllReduce(&h, w.buf.DType(), w.op, w.buf.Len(), b); zero {
				algo = "zero-copy"
			}
		} else {
			err = g.ring(&h, w.buf.DType(), w.op, w.buf.Len(), 0, 2*n-3,
				func(int) []byte { return b },
				func(int) ([]byte, int) { return b, 0 },
				func(t int) []byte {
					if t < n-1 {
						return b
					}
					return nil
				})
		}
		if err == nil && w.op == Avg && !(algo == "zero-copy" && zeroCopyDivides(w.buf.DType())) {
			divide(w.buf, n)
		}
		return algo, err
	case kindBroadcast:
		h.Root = uint16(w.root)
		if n == 1 {
			break
		}
		if len(w.buf.bytes()) <= g.cfg.smallBytes {
			return "direct", g.directBroadcast(&h, w.root, w.buf.bytes())
		}
		if sc, ok := g.t.(stagedComms); ok && n >= stagedMinWorld {
			return "staged", sc.stagedBroadcast(&h, w.root, w.buf.bytes())
		}
		return "chain", g.chainBroadcast(&h, w.root, w.buf.bytes())
	case kindAllGather:
		dst, src := w.buf.bytes(), w.src.bytes()
		es := w.buf.DType().Size()
		lo, _ := ShardRange(w.buf.Len(), n, g.rank)
		copy(dst[lo*es:], src)
		if n == 1 {
			break
		}
		if len(dst) <= g.cfg.smallBytes {
			return "direct", g.directAllGather(&h, es, w.buf.Len(), dst)
		}
		if sc, ok := g.t.(stagedComms); ok && n >= stagedMinWorld {
			return "staged", sc.stagedAllGather(&h, es, w.buf.Len(), dst)
		}
		return "ring", g.ring(&h, w.buf.DType(), 0, w.buf.Len(), n-1, 2*n-3,
			func(int) []byte { return dst },
			func(int) ([]byte, int) { return dst, 0 },
			func(int) []byte { return nil })
	case kindReduceScatter:
		dst, src := w.buf.bytes(), w.src.bytes()
		if n == 1 {
			copy(dst, src)
			break
		}
		var err error
		algo := "ring"
		sc, staged := g.t.(stagedComms)
		if len(src) <= g.cfg.smallBytes {
			algo = "direct"
			err = g.directReduceScatter(&h, w.src.DType(), w.op, w.src.Len(), dst, src)
		} else if staged && n >= stagedMinWorld {
			algo = "staged"
			err = sc.stagedReduceScatter(&h, w.src.DType(), w.op, w.src.Len(), dst, src)
		} else {
			es := w.src.DType().Size()
			scratch := g.scratchBytes(len(src))
			lo, _ := ShardRange(w.src.Len(), n, g.rank)
			err = g.ring(&h, w.src.DType(), w.op, w.src.Len(), 0, n-2,
				func(t int) []byte {
					if t == 0 {
						return src
					}
					return scratch
				},
				func(t int) ([]byte, int) {
					if t == n-2 {
						return dst, lo * es
					}
					return scratch, 0
				},
				func(int) []byte { return src })
		}
		if err == nil && w.op == Avg {
			divide(w.buf, n)
		}
		return algo, err
	}
	return "local", nil
}

func (g *group) scratchBytes(n int) []byte {
	if cap(g.scratch) < n {
		g.scratch = make([]byte, n)
	}
	return g.scratch[:n]
}

func (g *group) tmpBytes(stream, n int) []byte {
	if cap(g.tmp[stream]) < n {
		g.tmp[stream] = make([]byte, n)
	}
	return g.tmp[stream][:n]
}

func mod(a, n int) int { return ((a % n) + n) % n }

// global is the rank of a sub-group's rank p in the whole group (p itself in a group).
func (g *group) global(p int) int {
	if g.ranks == nil {
		return p
	}
	return g.ranks[p]
}

// stagedComms is a transport that runs large collectives itself, through memory every rank
// can read (the shared-memory transport; see shmstage.go). They block until done and fail with the transport's error (naming a dead peer) or ErrMismatch when
// the peers run a different collective.
type stagedComms interface {
	stagedAllReduce(h *Header, dt DType, op Op, count int, b []byte) (zeroCopy bool, err error)
	stagedBroadcast(h *Header, root int, b []byte) error
	stagedAllGather(h *Header, es, count int, dst []byte) error
	stagedReduceScatter(h *Header, dt DType, op Op, count int, dst, src []byte) error
}

// stagedMinWorld is the smallest world that uses stagedComms. At world 2 it beats the ring
// too (measured on 2 cores, 1-256 MiB: all-reduce 1.3-2.3x, reduce-scatter and all-gather
// 1.5-2.5x the busbw), and the sums are the same: a two-term float sum does not depend on
// the order of its terms.
const stagedMinWorld = 2

// recv receives one frame of the collective described by want from peer and checks that the
// sender runs the same collective (the desync check).
func (g *group) recv(peer, s int, want *Header, b []byte) error {
	var got Header
	err := g.t.Recv(peer, s, &got, b)
	return g.recvErr(peer, want, &got, len(b), err)
}

func (g *group) recvErr(peer int, want, got *Header, n int, err error) error {
	if got.Seq != 0 && !got.sameOp(want) {
		return fmt.Errorf("%w: desync: rank %d runs %s, rank %d sent %s", ErrMismatch, g.global(g.rank), want, g.global(peer), got)
	}
	if err != nil {
		if errors.Is(err, ErrMismatch) && got.Seq != 0 {
			return fmt.Errorf("%w: rank %d runs %s and expected %d bytes, rank %d sent %s with %d bytes",
				ErrMismatch, g.global(g.rank), want, n, g.global(peer), got, got.Len)
		}
		return fmt.Errorf("recv from rank %d: %w", g.global(peer), err)
	}
	return nil
}

// viewRecver is a transport whose received payload can be read in place (shared memory):
// RecvView receives a frame of n payload bytes like Recv, calls check on its header before
// consuming any payload, then hands the payload to fn in order, in pieces of whole elements.
type viewRecver interface {
	RecvView(peer, s int, h *Header, n int, check func(*Header) error, fn func(off int, p []byte)) error
}

// recvReduce receives a frame of len(out) bytes from peer and stores received op red in out
// (out may alias red). With a viewRecver it reduces straight out of the transport's buffer.
func (g *group) recvReduce(peer, s int, want *Header, dt DType, op Op, out, red, tmp []byte) error {
	vr, ok := g.t.(viewRecver)
	if !ok {
		in := tmp[:len(out)]
		if err := g.recv(peer, s, want, in); err != nil {
			return err
		}
		reduceInto(dt, op, out, in, red)
		return nil
	}
	var got Header
	err := vr.RecvView(peer, s, &got, len(out), func(h *Header) error {
		if !h.sameOp(want) {
			return fmt.Errorf("%w: desync", ErrMismatch)
		}
		return nil
	}, func(off int, p []byte) {
		reduceInto(dt, op, out[off:off+len(p)], p, red[off:off+len(p)])
	})
	return g.recvErr(peer, want, &got, len(out), err)
}

func (g *group) send(peer, s int, h *Header, b []byte) error {
	if err := g.t.Send(peer, s, h, b); err != nil {
		return fmt.Errorf("send to rank %d: %w", g.global(peer), err)
	}
	return nil
}

// parallel runs fns concurrently (the first on the calling goroutine) and returns the first
// error. The first error also aborts the group, so the other functions stop promptly.
func (g *group) parallel(fns ...func() error) error {
	if len(fns) == 1 {
		return fns[0]()
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	run := func(f func() error) {
		if err := f(); err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
			g.fail(err, true)
		}
	}
	wg.Add(len(fns) - 1)
	for _, f := range fns[1:] {
		go func() { defer wg.Done(); run(f) }()
	}
	run(fns[0])
	wg.Wait()
	return first
}

// barrier is a dissemination barrier: in round k every rank signals rank+2^k and waits for
// rank-2^k, so after ceil(log2 n) rounds every rank has heard from every other.
func (g *group) barrier(h *Header) error {
	n, r := g.size, g.rank
	for d := 1; d < n; d *= 2 {
		to, from := mod(r+d, n), mod(r-d, n)
		if err := g.parallel(
			func() error { return g.recv(from, 0, h, nil) },
			func() error { return g.send(to, 0, h, nil) },
		); err != nil {
			return err
		}
	}
	return nil
}

// directAllReduce sends the whole buffer to every peer and reduces the n contributions in rank
// order, so every rank computes bit-identical results. One latency step; n-1 times the traffic.
func (g *group) directAllReduce(h *Header, dt DType, op Op, b []byte) error {
	n, r, sz := g.size, g.rank, len(b)
	all := g.scratchBytes(n * sz)
	copy(all[r*sz:], b)
	fns := []func() error{func() error {
		for p := range n {
			if p != r {
				if err := g.recv(p, 0, h, all[p*sz:(p+1)*sz]); err != nil {
					return err
				}
			}
		}
		return nil
	}}
	for p := range n {
		if p != r {
			fns = append(fns, func() error { return g.send(p, 0, h, b) })
		}
	}
	if err := g.parallel(fns...); err != nil {
		return err
	}
	reduceInto(dt, op, b, all[:sz], all[sz:2*sz])
	for p := 2; p < n; p++ {
		reduceInto(dt, op, b, b, all[p*sz:(p+1)*sz])
	}
	return nil
}

// directReduceScatter sends shard p of src to rank p and reduces the received shards in rank
// order.
func (g *group) directReduceScatter(h *Header, dt DType, op Op, count int, dst, src []byte) error {
	n, r, es := g.size, g.rank, dt.Size()
	sz := len(dst)
	all := g.scratchBytes(n * sz)
	lo, hi := ShardRange(count, n, r)
	copy(all[r*sz:], src[lo*es:hi*es])
	fns := []func() error{func() error {
		for p := range n {
			if p != r {
				if err := g.recv(p, 0, h, all[p*sz:(p+1)*sz]); err != nil {
					return err
				}
			}
		}
		return nil
	}}
	for p := range n {
		if p != r {
			plo, phi := ShardRange(count, n, p)
			fns = append(fns, func() error { return g.send(p, 0, h, src[plo*es:phi*es]) })
		}
	}
	if err := g.parallel(fns...); err != nil {
		return err
	}
	reduceInto(dt, op, dst, all[:sz], all[sz:2*sz])
	for p := 2; p < n; p++ {
		reduceInto(dt, op, dst, dst, all[p*sz:(p+1)*sz])
	}
	return nil
}

// directAllGather sends this rank's shard to every peer and receives theirs in place.
func (g *group) directAllGather(h *Header, es, count int, dst []byte) error {
	n, r := g.size, g.rank
	lo, hi := ShardRange(count, n, r)
	fns := []func() error{func() error {
		for p := range n {
			if p != r {
				plo, phi := ShardRange(count, n, p)
				if err := g.recv(p, 0, h, dst[plo*es:phi*es]); err != nil {
					return err
				}
			}
		}
		return nil
	}}
	for p := range n {
		if p != r {
			fns = append(fns, func() error { return g.send(p, 0, h, dst[lo*es:hi*es]) })
		}
	}
	return g.parallel(fns...)
}

// directBroadcast sends root's buffer to every peer.
func (g *group) directBroadcast(h *Header, root int, b []byte) error {
	if g.rank != root {
		return g.recv(root, 0, h, b)
	}
	var fns []func() error
	for p := range g.size {
		if p != root {
			fns = append(fns, func() error { return g.send(p, 0, h, b) })
		}
	}
	return g.parallel(fns...)
}
