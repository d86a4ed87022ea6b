//go:build linux

package comm

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"
)

// Shared buffers (AllocFloat32) and the zero-copy all-reduce over them.
//
// A region is a /dev/shm file that its rank maps as ordinary memory for the caller (DDP's
// gradient buffer) and that every peer maps too. Its name is published in the owner's
// region table (in the staging control page) and the file is unlinked once every rank has
// mapped it, so nothing is left behind when a process dies. Regions are numbered in
// allocation order, which is the same on every rank.
//
// A staged all-reduce whose buffer lies in a region says so in the extension of its first
// chunk's header (region, offset, length). When every rank's does, the ranks skip the
// staging: each reduces its 1/n slice of the whole buffer straight from the peers' buffers,
// in rank order, writes the result into every rank's buffer, and waits for the others to be
// done. That reads and writes each byte of the buffer once per rank (the staged path copies
// in, reduces and copies out: twice as much traffic) and has two waits in all, not two per
// chunk. The first chunk has been staged already by then (a rank cannot know before it sees
// the peers' headers); its copy is the only one.

const (
	shmRegionTable = 1024 // region i's name at shmRegionTable + 64*i, zero-terminated
	shmRegionName  = 64
	shmMaxRegions  = (shmCtl - shmRegionTable) / shmRegionName
	zeroCopyMagic  = 0x7a637079
)

// shmRegion is one shared buffer: this rank's mapping and every peer's.
type shmRegion struct {
	name   string
	mem    []byte   // this rank's (never unmapped: it is the caller's memory)
	peers  [][]byte // [rank]: the peers' regions of the same index, mapped here
	lo, hi uintptr  // mem's address range, once committed
	ok     bool
}

func (t *shmTransport) newRegion(nbytes int) (int, error) {
	if t.own == nil || len(t.regions) >= shmMaxRegions {
		return -1, nil
	}
	id := len(t.regions)
	r := &shmRegion{peers: make([][]byte, t.size)}
	t.regMu.Lock()
	t.regions = append(t.regions, r)
	t.regMu.Unlock()
	size := (nbytes + 4095) &^ 4095
	name, mem, err := createSHM(size)
	if err != nil {
		return id, err
	}
	r.name, r.mem = name, mem
	if len(name) >= shmRegionName {
		return id, fmt.Errorf("shared buffer name %q too long", name)
	}
	entry := t.own.table[id*shmRegionName : (id+1)*shmRegionName]
	clear(entry)
	copy(entry, name)
	return id, nil
}

func (t *shmTransport) mapRegion(id, nbytes int) error {
	t.regMu.RLock()
	r := t.regions[id]
	t.regMu.RUnlock()
	size := (nbytes + 4095) &^ 4095
	for p, s := range t.stages {
		if p == t.rank {
			continue
		}
		entry := s.table[id*shmRegionName : (id+1)*shmRegionName]
		n := 0
		for n < len(entry) && entry[n] != 0 {
			n++
		}
		pm, err := openSHM(string(entry[:n]), size)
		if err != nil {
			return fmt.Errorf("mapping rank %d's shared buffer %d: %w", p, id, err)
		}
		t.regMu.Lock()
		r.peers[p] = pm
		t.regMu.Unlock()
	}
	return nil
}

func (t *shmTransport) commitRegion(id int, ok bool) []byte {
	t.regMu.Lock()
	defer t.regMu.Unlock()
	r := t.regions[id]
	if r.name != "" {
		syscall.Unlink(r.name)
	}
	if !ok {
		for p, pm := range r.peers {
			if pm != nil {
				syscall.Munmap(pm)
				r.peers[p] = nil
			}
		}
		if r.mem != nil {
			syscall.Munmap(r.mem)
			r.mem = nil
		}
		return nil
	}
	t.mu.Lock()
	for _, pm := range r.peers {
		if pm != nil {
			t.maps = append(t.maps, pm) // unmapped with the transport
		}
	}
	t.mu.Unlock()
	r.lo = uintptr(unsafe.Pointer(&r.mem[0]))
	r.hi = r.lo + uintptr(len(r.mem))
	r.ok = true
	return r.mem
}

// regionOf finds the region that holds b: its index and b's offset in it.
func (t *shmTransport) regionOf(b []byte) (int, int, bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	lo := uintptr(unsafe.Pointer(&b[0]))
	hi := lo + uintptr(len(b))
	t.regMu.RLock()
	defer t.regMu.RUnlock()
	for id, r := range t.regions {
		if r.ok && lo >= r.lo && hi <= r.hi {
			return id, int(lo - r.lo), true
		}
	}
	return 0, 0, false
}

// putZeroCopy writes the zero-copy extension of a first chunk's header into slot: where b
// lies in a region, or nothing.
func (t *shmTransport) putZeroCopy(slot int, b []byte) {
	ext := t.own.ext[slot]
	id, off, ok := t.regionOf(b)
	if !ok {
		binary.LittleEndian.PutUint32(ext, 0)
		return
	}
	binary.LittleEndian.PutUint32(ext[0:], zeroCopyMagic)
	binary.LittleEndian.PutUint32(ext[4:], uint32(id))
	binary.LittleEndian.PutUint64(ext[8:], uint64(off))
	binary.LittleEndian.PutUint64(ext[16:], uint64(len(b)))
}

// zeroCopyViews returns every rank's buffer (b for this rank, the others through their
// mapped regions) when every rank's first chunk header in slot says its buffer lies in a
// region; nil otherwise, which every rank concludes alike.
func (t *shmTransport) zeroCopyViews(slot int, b []byte) [][]byte {
	t.regMu.RLock()
	defer t.regMu.RUnlock()
	views := make([][]byte, t.size)
	for p, s := range t.stages {
		ext := s.ext[slot]
		if binary.LittleEndian.Uint32(ext[0:]) != zeroCopyMagic {
			return nil
		}
		id := int(binary.LittleEndian.Uint32(ext[4:]))
		off := binary.LittleEndian.Uint64(ext[8:])
		n := binary.LittleEndian.Uint64(ext[16:])
		if id >= len(t.regions) || !t.regions[id].ok || n != uint64(len(b)) {
			return nil
		}
		if p == t.rank {
			views[p] = b
			continue
		}
		pm := t.regions[id].peers[p]
		if off+n > uint64(len(pm)) {
			return nil
		}
		views[p] = pm[off : off+n]
	}
	return views
}

// zeroCopyAllReduce reduces this rank's slice of the count elements straight from every
// rank's buffer (views) and writes the result into all of them, then waits until every
// rank has done the same. last is the collective's last chunk number: the counters jump
// there, as if every chunk had gone through the slots.
func (t *shmTransport) zeroCopyAllReduce(dt DType, op Op, count int, views [][]byte, last uint64) error {
	t.zeroCopies.Add(1)
	n, r, es := t.size, t.rank, dt.Size()
	b := views[r]
	lo, hi := ShardRange(count, n, r)
	ins := make([][]byte, n)
	const blk = 64 << 10 // bytes reduced, then copied to the peers, while in L2
	for x := lo * es; x < hi*es; x += blk {
		y := min(x+blk, hi*es)
		for p := range n {
			ins[p] = views[p][x:y]
		}
		reduceN(dt, op, b[x:y], ins, t.stageTmp)
		if op == Avg && zeroCopyDivides(dt) {
			divideBlock(b[x:y], n) // while in L1: Avg's division needs no pass of its own
		}
		for p := range n {
			if p != r {
				copy(views[p][x:y], b[x:y])
			}
		}
	}
	if t.zeroCopyReduced != nil {
		if err := t.zeroCopyReduced(); err != nil {
			return err
		}
	}
	t.publish(t.own.red, last)
	if err := t.waitStage(stageRed, last, -1); err != nil {
		return err
	}
	t.publish(t.own.done, last)
	return nil
}
