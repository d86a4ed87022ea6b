//go:build linux

package comm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// Staged collectives: shared-memory all-reduce, reduce-scatter, all-gather and broadcast for
// world >= 2.
//
// With more ranks than cores every synchronisation point waits for the OS to schedule a
// peer, so the ring's 2(n-1) steps per chunk (each a copy into a ring and a reduce or copy
// out of it) cost more in waiting than in copying. Here every rank owns a staging area in
// its shared-memory file: a control page with three counters and shmStageSlots slots of one
// chunk each. Chunks of a collective are numbered by a counter that runs on across
// collectives (every rank stages the same chunks in the same order), so a counter value
// says how far its rank got:
//
//   - in: the rank has copied chunk G of its input into its slot G%slots (header included),
//     all but its own 1/n slice of the chunk, which only it reads;
//   - red: the rank has reduced its slice of chunk G (its own input from its buffer, the
//     peers' read in place from their slots, in rank order) and stored the result in its
//     buffer and over that slice of its slot;
//   - done: the rank has copied every peer's reduced slice of chunk G into its buffer.
//
// All-reduce of one chunk therefore has two waits (all in, all red) instead of 2(n-1), and
// each rank copies its input in once and the result out once. A slot is refilled only after
// every rank is done with the chunk it held. Every element is reduced by one rank in rank
// order, so results are bit-identical on every rank and every run for a given world size.
// Broadcast: the root copies each chunk into its slot once and the n-1 others copy it out;
// the root runs up to shmStageSlots chunks ahead. All-gather: every rank stages a piece of
// its shard per chunk, and every rank copies the others' pieces out (one wait per chunk).
// Reduce-scatter: the all-reduce without the copy out, one piece of every shard per chunk.

// stageNTBytes is the all-reduce size from which results are written to the caller's buffer
// with stores that bypass the cache (simd.CopyNT): from there the buffers of four ranks and the
// staging areas no longer fit a typical last-level cache, and a normal store would first
// read every destination line from memory. Smaller results stay in the cache, where the
// caller reads them next. Measured on 2 cores (world 4, 64-256 MiB): about a third less CPU
// time per all-reduce.
const stageNTBytes = 8 << 20

const (
	shmStageSlots = 3
	shmStageIn    = 0
	shmStageRed   = 128
	shmStageDone  = 256
	shmStageWait  = 384 // the owner sleeps here waiting for peers' counters
	shmStageHdr   = 512 // slot i's header at shmStageHdr + 64*i
)

// shmStage is one rank's view of a staging area (its own or a peer's).
type shmStage struct {
	in, red, done *uint64
	word          *uint32
	hdr, data     [][]byte // per slot
	ext           [][]byte // per slot: the header's zero-copy extension (shmzero.go)
	table         []byte   // the region table (shmzero.go)
}

// stageBytes is the size of a staging area of slot bytes per slot.
func stageBytes(slot int) int { return shmCtl + shmStageSlots*slot }

// stageSlotBytes is the chunk size of staged collectives: the ring chunk, in whole pages.
func stageSlotBytes(cfg config) int { return (cfg.chunkBytes + 4095) &^ 4095 }

func newSHMStage(mem []byte, slot int) *shmStage {
	s := &shmStage{
		in:   (*uint64)(unsafe.Pointer(&mem[shmStageIn])),
		red:  (*uint64)(unsafe.Pointer(&mem[shmStageRed])),
		done: (*uint64)(unsafe.Pointer(&mem[shmStageDone])),
		word: (*uint32)(unsafe.Pointer(&mem[shmStageWait])),
	}
	s.table = mem[shmRegionTable:shmCtl]
	for i := range shmStageSlots {
		s.hdr = append(s.hdr, mem[shmStageHdr+64*i:shmStageHdr+64*i+headerSize])
		s.ext = append(s.ext, mem[shmStageHdr+64*i+headerSize:shmStageHdr+64*(i+1)])
		s.data = append(s.data, mem[shmCtl+i*slot:shmCtl+(i+1)*slot])
	}
	return s
}

// stagedAllReduce all-reduces the count elements of b (see the comment above); zeroCopy
// reports that it took the zero-copy path (shmzero.go).
func (t *shmTransport) stagedAllReduce(h *Header, dt DType, op Op, count int, b []byte) (zeroCopy bool, err error) {
	n, r, es := t.size, t.rank, dt.Size()
	per := t.slotBytes / es // elements per chunk
	nc := (count + per - 1) / per
	g0 := t.staged // chunk G = g0+1+c
	t.staged += uint64(nc)
	me := t.stages[r]
	ins := make([][]byte, n)
	out := func(dst, src []byte) { copy(dst, src) }
	if len(b) >= stageNTBytes {
		out = simd.CopyNT
	}
	// put copies chunk c of b into this rank's slot, but for this rank's own slice, which
	// it reduces straight from b.
	put := func(c int) {
		G := g0 + 1 + uint64(c)
		clo := c * per
		m := min(count, clo+per) - clo
		slot := int(G % shmStageSlots)
		h.put(me.hdr[slot])
		if c == 0 {
			t.putZeroCopy(slot, b)
		}
		for p := range n {
			if p != r {
				plo, phi := ShardRange(m, n, p)
				copyCached(me.data[slot][plo*es:phi*es], b[(clo+plo)*es:(clo+phi)*es])
			}
		}
		t.publish(me.in, G)
	}
	// reduce reduces this rank's slice of chunk c (every input staged) into its slot and b;
	// at the first chunk, when every rank's buffer is shared, it reduces the whole buffer in
	// place instead (shmzero.go) and reports zero.
	reduce := func(c int) (zero bool, err error) {
		G := g0 + 1 + uint64(c)
		slot := int(G % shmStageSlots)
		if err := t.checkStaged(h, slot, -1); err != nil {
			return false, err
		}
		if c == 0 {
			if views := t.zeroCopyViews(slot, b); views != nil {
				return true, t.zeroCopyAllReduce(dt, op, count, views, g0+uint64(nc))
			}
		}
		clo := c * per
		m := min(count, clo+per) - clo // elements in this chunk
		lo, hi := ShardRange(m, n, r)
		for p := range n {
			ins[p] = t.stages[p].data[slot][lo*es : hi*es]
		}
		own := b[(clo+lo)*es : (clo+hi)*es]
		res := ins[r]
		ins[r] = own
		reduceN(dt, op, res, ins, t.stageTmp)
		out(own, res)
		t.publish(me.red, G)
		return false, nil
	}
	// gather copies the peers' reduced slices of chunk c into b.
	gather := func(c int) {
		G := g0 + 1 + uint64(c)
		slot := int(G % shmStageSlots)
		clo := c * per
		m := min(count, clo+per) - clo
		for p := range n {
			if p != r {
				plo, phi := ShardRange(m, n, p)
				out(b[(clo+plo)*es:(clo+phi)*es], t.stages[p].data[slot][plo*es:phi*es])
			}
		}
		t.publish(me.done, G)
	}
	// Whenever it runs, a rank does whatever its peers have made possible (reduce a chunk
	// all have staged, stage the next chunk into a free slot, gather a chunk all have
	// reduced) and waits only when nothing is: with more ranks than cores, each turn on a
	// core then does as much work as it can.
	var puts, reds, outs int // chunks staged, reduced, gathered by this rank
	canReduce := func() bool { return reds < puts && t.all(stageIn, g0+1+uint64(reds)) }
	canPut := func() bool {
		G := g0 + 1 + uint64(puts)
		return puts < nc && t.all(stageDone, G-min(G, shmStageSlots))
	}
	canGather := func() bool { return outs < reds && t.all(stageRed, g0+1+uint64(outs)) }
	for outs < nc {
		switch {
		case canReduce():
			zero, err := reduce(reds)
			if zero || err != nil {
				return zero, err
			}
			reds++
		case canPut():
			put(puts)
			puts++
		case canGather():
			gather(outs)
			outs++
		default:
			if err := t.waitStaged(func() bool { return canReduce() || canPut() || canGather() }); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// stagedReduceScatter reduces src over all ranks into this rank's shard dst: chunk c of the
// collective is piece c of every shard; each rank stages its pieces of the others' shards
// in its slot (one sub-area per shard) and reduces its own from every slot and its src, in
// rank order (one wait per chunk).
func (t *shmTransport) stagedReduceScatter(h *Header, dt DType, op Op, count int, dst, src []byte) error {
	n, r, es := t.size, t.rank, dt.Size()
	per := max(1, t.slotBytes/(n*es)) // elements per piece
	nc := max(1, ((count+n-1)/n+per-1)/per)
	g0 := t.staged
	t.staged += uint64(nc)
	me := t.stages[r]
	ins := make([][]byte, n)
	mylo, _ := ShardRange(count, n, r)
	// piece is the element range of chunk c of shard p.
	piece := func(p, c int) (int, int) {
		lo, hi := ShardRange(count, n, p)
		return min(hi, lo+c*per), min(hi, lo+(c+1)*per)
	}
	var puts, reds int
	canPut := func() bool {
		G := g0 + 1 + uint64(puts)
		return puts < nc && t.all(stageDone, G-min(G, shmStageSlots))
	}
	canReduce := func() bool { return reds < puts && t.all(stageIn, g0+1+uint64(reds)) }
	for reds < nc {
		switch {
		case canReduce():
			G := g0 + 1 + uint64(reds)
			slot := int(G % shmStageSlots)
			if err := t.checkStaged(h, slot, -1); err != nil {
				return err
			}
			lo, hi := piece(r, reds)
			for p := range n {
				ins[p] = t.stages[p].data[slot][r*per*es : (r*per+hi-lo)*es]
			}
			ins[r] = src[lo*es : hi*es]
			reduceN(dt, op, dst[(lo-mylo)*es:(hi-mylo)*es], ins, t.stageTmp)
			t.publish(me.done, G)
			reds++
		case canPut():
			G := g0 + 1 + uint64(puts)
			slot := int(G % shmStageSlots)
			h.put(me.hdr[slot])
			for q := range n {
				if q != r {
					lo, hi := piece(q, puts)
					copyCached(me.data[slot][q*per*es:(q*per+hi-lo)*es], src[lo*es:hi*es])
				}
			}
			t.publish(me.in, G)
			puts++
		default:
			if err := t.waitStaged(func() bool { return canReduce() || canPut() }); err != nil {
				return err
			}
		}
	}
	return nil
}

// stagedAllGather gathers every rank's shard of the count elements of dst (this rank's is
// in place already) through the staging slots: chunk c of the collective is piece c of
// every rank's shard, which its owner copies in once and every other rank copies out.
func (t *shmTransport) stagedAllGather(h *Header, es, count int, dst []byte) error {
	n, r := t.size, t.rank
	per := t.slotBytes / es
	nc := max(1, ((count+n-1)/n+per-1)/per)
	g0 := t.staged
	t.staged += uint64(nc)
	me := t.stages[r]
	out := func(dst, src []byte) { copy(dst, src) }
	if len(dst) >= stageNTBytes {
		out = simd.CopyNT
	}
	// piece is the byte range of chunk c of rank p's shard in dst.
	piece := func(p, c int) (int, int) {
		lo, hi := ShardRange(count, n, p)
		return min(hi, lo+c*per) * es, min(hi, lo+(c+1)*per) * es
	}
	var puts, outs int
	canPut := func() bool {
		G := g0 + 1 + uint64(puts)
		return puts < nc && t.all(stageDone, G-min(G, shmStageSlots))
	}
	canGather := func() bool { return outs < puts && t.all(stageIn, g0+1+uint64(outs)) }
	for outs < nc {
		switch {
		case canPut():
			G := g0 + 1 + uint64(puts)
			slot := int(G % shmStageSlots)
			lo, hi := piece(r, puts)
			h.put(me.hdr[slot])
			copyCached(me.data[slot], dst[lo:hi])
			t.publish(me.in, G)
			puts++
		case canGather():
			G := g0 + 1 + uint64(outs)
			slot := int(G % shmStageSlots)
			if err := t.checkStaged(h, slot, -1); err != nil {
				return err
			}
			for p := range n {
				if p != r {
					lo, hi := piece(p, outs)
					out(dst[lo:hi], t.stages[p].data[slot][:hi-lo])
				}
			}
			t.publish(me.done, G)
			outs++
		default:
			if err := t.waitStaged(func() bool { return canPut() || canGather() }); err != nil {
				return err
			}
		}
	}
	return nil
}

// all reports whether counter c of every rank is at least v.
func (t *shmTransport) all(c func(*shmStage) *uint64, v uint64) bool {
	for _, s := range t.stages {
		if atomic.LoadUint64(c(s)) < v {
			return false
		}
	}
	return true
}

func stageIn(s *shmStage) *uint64   { return s.in }
func stageRed(s *shmStage) *uint64  { return s.red }
func stageDone(s *shmStage) *uint64 { return s.done }

// stagedBroadcast copies root's b to every rank through root's staging slots.
// Results of stageNTBytes and more are written with simd.CopyNT, smaller ones stay in the cache.
func (t *shmTransport) stagedBroadcast(h *Header, root int, b []byte) error {
	per := t.slotBytes
	nc := max(1, (len(b)+per-1)/per)
	out := copyCached
	if len(b) >= stageNTBytes {
		out = simd.CopyNT
	}
	g0 := t.staged
	t.staged += uint64(nc)
	me, src := t.stages[t.rank], t.stages[root]
	for c := range nc {
		G := g0 + 1 + uint64(c)
		slot := int(G % shmStageSlots)
		lo, hi := c*per, min(len(b), (c+1)*per)
		if t.rank == root {
			if err := t.waitStage(func(s *shmStage) *uint64 { return s.done }, G-min(G, shmStageSlots), -1); err != nil {
				return err
			}
			h.put(me.hdr[slot])
			copyCached(me.data[slot], b[lo:hi])
			t.publish(me.in, G)
		} else {
			if err := t.waitStage(func(s *shmStage) *uint64 { return s.in }, G, root); err != nil {
				return err
			}
			if err := t.checkStaged(h, slot, root); err != nil {
				return err
			}
			out(b[lo:hi], src.data[slot][:hi-lo])
		}
		t.publish(me.done, G)
	}
	return nil
}

// waitStage waits until counter(rank) >= v for rank only (rank >= 0) or for every rank.
func (t *shmTransport) waitStage(counter func(*shmStage) *uint64, v uint64, rank int) error {
	return t.waitStaged(func() bool {
		if rank >= 0 {
			return atomic.LoadUint64(counter(t.stages[rank])) >= v
		}
		for _, s := range t.stages {
			if atomic.LoadUint64(counter(s)) < v {
				return false
			}
		}
		return true
	})
}

// waitStaged waits until ready holds, as the transport's other waits (spin, yield, sleep),
// on this rank's staging word, which every publish wakes. Its yields go to the OS, as those
// of small frames: the peer that will publish is often waiting for this core.
func (t *shmTransport) waitStaged(ready func() bool) error {
	return t.wait(t.own.word, stageWaitID(t.size, t.k), true, ready)
}

// publish stores v into this rank's counter c and wakes the peers that sleep.
func (t *shmTransport) publish(c *uint64, v uint64) {
	atomic.StoreUint64(c, v)
	for p, s := range t.stages {
		if p != t.rank {
			t.wake(s.word, p, stageWaitID(t.size, t.k))
		}
	}
}

// checkStaged is the desync check: the headers the peers (or only rank from, when >= 0)
// wrote with their chunk in slot must describe the same collective as want.
func (t *shmTransport) checkStaged(want *Header, slot, from int) error {
	for p, s := range t.stages {
		if p == t.rank || (from >= 0 && p != from) {
			continue
		}
		var got Header
		if err := got.get(s.hdr[slot]); err != nil {
			return fmt.Errorf("staged chunk from rank %d: %w", p, err)
		}
		if !got.sameOp(want) {
			return fmt.Errorf("%w: desync: rank %d runs %s, rank %d staged %s", ErrMismatch, t.rank, want, p, &got)
		}
	}
	return nil
}

// copyCached copies src to dst in pieces below the size from which Go's memmove uses
// non-temporal stores (1 MiB on amd64): staged chunks are read by the peers next, from the
// cache they share, instead of from memory.
func copyCached(dst, src []byte) {
	const piece = 512 << 10
	for len(src) > piece {
		copy(dst[:piece], src[:piece])
		dst, src = dst[piece:], src[piece:]
	}
	copy(dst, src)
}
