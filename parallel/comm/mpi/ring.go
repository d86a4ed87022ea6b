package mpi

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Note [Ring over MPI messages]: on a shared 2-core machine OpenMPI 4.1's MPI_Iallreduce
// (libnbc; MPI_Allreduce of coll/tuned was no better) of 64-256 MiB reached 0.1-0.14 GB/s
// of bus bandwidth at world 2, while its point-to-point messages moved 2.4 GB/s one way
// (vader's single-copy CMA); a ring over those messages reached 1.0 and 0.54 GB/s there
// (bench/mpi prints both, with each row's load average). So from a size on
// (WithRingBytes; thresholds per collective in defaultRingBytes, measured by bench/mpi) the
// collectives run the algorithms of nccl and gloo over MPI_Isend/MPI_Irecv on a
// communicator of their own, tagged with the collective's sequence number:
//
//   - ReduceScatter: a ring of Size()-1 steps over Size() segments (comm.ShardRange). At
//     step s rank r sends its partial sum of segment r-s-1 to rank r+1 and reduces the
//     partial sum of segment r-s-2 it receives from rank r-1 with its own input, in pieces
//     as they arrive (overlapping the transfer of the next piece); after the last step it
//     holds segment r reduced over every rank, added up in the fixed order r+1, r+2, ..., r.
//   - AllGather: a ring of Size()-1 steps passing the segments on: at step s rank r sends
//     segment r-s and receives segment r-s-1.
//   - AllReduce: the ring reduce-scatter in place, then the ring all-gather, so its result
//     has the bits that ReduceScatter then AllGather give at any size past both thresholds.
//   - Broadcast: a pipelined chain root, root+1, ..., root-1: the buffer travels in pieces
//     (bcastPiece), each forwarded by a rank as soon as it arrived, so that every link
//     carries the buffer once and the hops overlap.
//
// Each segment is reduced once, in ring order, and then copied, so every rank ends with
// the same bits, run after run, as comm promises; the sums may differ in the last bits from
// OpenMPI's own collectives'. Before any data moves, every rank sends every other one a
// header naming the collective (kind, dtype, length, root, op) and checks the headers it
// receives (agree): ranks that disagree all fail the collective with comm.ErrMismatch
// naming each rank's call, no data having moved, and the group goes on.

// Note [Ring thresholds]: bench/mpi runs OpenMPI 4.1.4's collectives (libnbc, vader shared
// memory with CMA single copy) and the package's algorithms at every size from 1 KiB to
// 64 MiB, alternating, in 3 rounds, at world 2 and 3 on a 2-core machine (world 3 is
// oversubscribed; `go run ./bench/mpi`, bench/results/mpi.json, with its machine and the load
// of each row). The same code measured twice differs by up to 2x there, so a threshold needs
// a win in every one of the rounds. Below 1 MiB OpenMPI's are 1.04-7x faster: the header
// exchange and the hand-offs between the op's goroutine and the MPI thread cost about 1 ms.
// Ratios ring/OpenMPI of busbw on a 2-core AMD Zen 5, per round:
//
//   - all-reduce: 1.0-1.3 at world 2 and 2.5-2.7 at world 3 at 4 MiB, 0.9-1.0 at 16 MiB,
//     1.4-2.7 at 64 MiB at both: from 4 MiB.
//   - reduce-scatter: 0.9-3 (noise) at 4 MiB, 2.5-6.5 from 16 MiB at both worlds: 16 MiB.
//   - all-gather (no reduction, so one message per step): 0.4-0.93 at every size from 1 MiB
//     at both worlds, one round's 2.7 aside (an earlier run on another 2-core machine: 1.3-1.7
//     at world 2 at 64 MiB, 0.7-1.4 at world 3): off by default.
//   - broadcast: the chain 0.44-1.0 of MPI_Ibcast at world 2 (one round's 4.6 aside) and
//     0.47-0.56 at world 3 from 4 MiB (its receivers each copy straight from the root's
//     memory with CMA, while the chain's middle rank must receive each piece before it
//     forwards it), so the chain is off by default and runs only when WithRingBytes or
//     RingBytesEnv asks for it (links where a tree from one root is slower than a pipeline).
//
// These are one machine's numbers; WithRingBytes sets all four thresholds.

// ringChunk is the largest message of the reducing steps: a reduce-scatter step's segment
// travels in pieces of at most ringChunk bytes, all posted at once, so that the reduction
// of one piece overlaps the transfer of the next.
const ringChunk = 4 << 20

// bcastPiece is the size of the chain broadcast's pieces for a buffer of nb bytes: an
// eighth of it, within [128 KiB, ringChunk], so that a chain of several hops overlaps them
// while small buffers do not pay for many messages.
func bcastPiece(nb int) int { return min(ringChunk, max(128<<10, nb/8)) }

// ringTmp holds the rings' receive buffers between collectives, so that a training loop
// does not fault in fresh pages for every collective.
var ringTmp sync.Pool

// scratch is a buffer of at least n bytes from ringTmp; put it back with ringTmp.Put.
func scratch(n int) *[]byte {
	tmp, _ := ringTmp.Get().(*[]byte)
	if tmp == nil || len(*tmp) < max(1, n) {
		b := make([]byte, max(1, n))
		tmp = &b
	}
	return tmp
}

// segments splits total elements of es bytes at p into Size() segments (comm.ShardRange);
// seg(k) is segment k mod Size().
type segments struct {
	p            unsafe.Pointer
	total, n, es int
}

func (s segments) seg(k int) (unsafe.Pointer, int) {
	lo, hi := comm.ShardRange(s.total, s.n, ((k%s.n)+s.n)%s.n)
	if hi == lo {
		return nil, 0 // an empty segment may start at the buffer's end, where no pointer may point
	}
	return unsafe.Add(s.p, lo*s.es), hi - lo
}

// ringAllReduce all-reduces buf with op: ringReduceScatter in place, then ringAllGather.
func (g *Group) ringAllReduce(tag int, buf comm.Buffer, op comm.Op) error {
	p, total, dt, err := view(buf)
	if err != nil {
		return err
	}
	if err := g.agree(tag, header{kind: kindAllReduce, dtype: buf.DType(), total: total, op: op}); err != nil {
		return err
	}
	s := segments{p, total, g.size, buf.DType().Size()}
	mine, _ := s.seg(g.rank)
	if err := g.ringReduceScatter(tag, s, true, mine, dt, buf.DType(), op); err != nil {
		return err
	}
	if err := g.ringAllGather(tag, s, dt); err != nil {
		return err
	}
	if op == comm.Avg {
		divide(buf, g.size)
	}
	return nil
}

// ringReduceScatter runs the ring reduce-scatter over the segments of s (Note [Ring over
// MPI messages]) and leaves this rank's segment, reduced over every rank, at out. In
// place, the partial sums are kept in s's own segments (all-reduce; out must be s's
// segment g.rank). Otherwise s is left unchanged and the partial sums travel through
// scratch buffers; out may be s's segment g.rank itself (the last step reads each element
// of it before writing that element, and no earlier step reads it) but must not overlap s
// otherwise.
func (g *Group) ringReduceScatter(tag int, s segments, inPlace bool, out unsafe.Pointer, dt uintptr, dtype comm.DType, op comm.Op) error {
	n, r, es := g.size, g.rank, s.es
	_, most := s.seg(0)
	bufs := [2]*[]byte{scratch(most * es)}
	defer ringTmp.Put(bufs[0])
	if !inPlace {
		bufs[1] = scratch(most * es)
		defer ringTmp.Put(bufs[1])
	}
	var prev unsafe.Pointer // out of place: the partial sums received at the previous step
	for step := range n - 1 {
		sp, sn := s.seg(r - step - 1)
		own, rn := s.seg(r - step - 2)
		last := step == n-2
		recv := unsafe.Pointer(&(*bufs[0])[0])
		if !inPlace {
			recv = unsafe.Pointer(&(*bufs[step%2])[0])
			if step > 0 {
				sp = prev
			}
		}
		err := g.exchange(sp, sn, recv, rn, dt, es, tag, func(off, k int) {
			at := func(p unsafe.Pointer) unsafe.Pointer { return unsafe.Add(p, off*es) }
			switch {
			case inPlace:
				reduceInto(dtype, op, at(own), at(recv), k)
			case last:
				reduce3(dtype, op, at(out), at(recv), at(own), k)
			default:
				reduceInto(dtype, op, at(recv), at(own), k)
			}
		})
		if err != nil {
			return fmt.Errorf("ring reduce-scatter step %d: %w", step, err)
		}
		prev = recv
	}
	if n == 1 && !inPlace {
		mine, k := s.seg(0)
		copy(unsafe.Slice((*byte)(out), k*es), unsafe.Slice((*byte)(mine), k*es))
	}
	return nil
}

// ringAllGather passes the segments of s around the ring until every rank has all of
// them; this rank's own segment must be in place.
func (g *Group) ringAllGather(tag int, s segments, dt uintptr) error {
	for step := range g.size - 1 {
		sp, sn := s.seg(g.rank - step)
		rp, rn := s.seg(g.rank - step - 1)
		if err := g.exchange(sp, sn, rp, rn, dt, s.es, tag, nil); err != nil {
			return fmt.Errorf("ring all-gather step %d: %w", step, err)
		}
	}
	return nil
}

// chainBroadcast sends total elements at p down the chain root, root+1, ..., root-1 in
// pieces of bcastPiece bytes; a rank forwards each piece once it has arrived.
func (g *Group) chainBroadcast(tag int, p unsafe.Pointer, total int, dt uintptr, es, root int) error {
	n := g.size
	pos := (g.rank - root + n) % n
	next, prev := (g.rank+1)%n, (g.rank+n-1)%n
	per := max(1, bcastPiece(total*es)/es)
	piece := func(kind string, off int, peer int) *op {
		k, at := min(per, total-off), uintptr(unsafe.Add(p, off*es))
		recvBytes := -1
		if kind == "chain recv" {
			recvBytes = k * es
		}
		o := g.newOp(kind, k*es, recvBytes)
		o.peer, o.tag = peer, tag
		o.pinp(unsafe.Add(p, off*es))
		o.post = func() (uintptr, error) {
			var req uintptr
			if recvBytes >= 0 {
				return req, codeErr("MPI_Irecv", mpiIrecv(at, k, dt, peer, tag, g.ringComm, &req))
			}
			return req, codeErr("MPI_Isend", mpiIsend(at, k, dt, peer, tag, g.ringComm, &req))
		}
		return o
	}
	var recvs, sends []*op
	for off := 0; off < total || off == 0; off += per {
		if pos > 0 {
			recvs = append(recvs, piece("chain recv", off, prev))
		} else {
			sends = append(sends, piece("chain send", off, next))
		}
	}
	g.postAll(append(recvs, sends...))
	var errs []error
	for i, o := range recvs {
		<-o.done
		errs = append(errs, o.err)
		if o.err == nil && pos < n-1 {
			s := piece("chain send", i*per, next)
			g.postAll([]*op{s})
			sends = append(sends, s)
		}
	}
	for _, o := range sends {
		<-o.done
		errs = append(errs, o.err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chain broadcast from rank %d: %w", root, err)
	}
	return nil
}

// postAll posts ops on the MPI thread, in order.
func (g *Group) postAll(ops []*op) {
	if len(ops) == 0 {
		return
	}
	g.ops.Add(len(ops))
	g.e.calls <- func(e *engine) {
		for _, o := range ops {
			e.post(o)
		}
	}
}

// maxMessage is the largest message of an exchange that reduces nothing (all-gather): one
// message per step is fewest hand-offs, and MPI counts are 32-bit.
const maxMessage = 1 << 30

// exchange sends sn elements at send to the next rank and receives rn elements from the
// previous one into recv, both in pieces posted at once: of ringChunk bytes when arrived
// is set (it is called with the offset and count of each piece received, in order, so
// that reducing one overlaps the transfer of the next), else of up to maxMessage. It
// returns once every piece has gone both ways.
func (g *Group) exchange(send unsafe.Pointer, sn int, recv unsafe.Pointer, rn int, dt uintptr, es, tag int, arrived func(off, n int)) error {
	next, prev := (g.rank+1)%g.size, (g.rank+g.size-1)%g.size
	per := max(1, ringChunk/es)
	if arrived == nil {
		per = max(1, maxMessage/es)
	}
	var recvs, sends []*op
	for off := 0; off < rn || off == 0; off += per {
		k, at := min(per, rn-off), uintptr(unsafe.Add(recv, off*es))
		o := g.newOp("ring recv", k*es, k*es)
		o.peer, o.tag = prev, tag
		o.pinp(unsafe.Add(recv, off*es))
		o.post = func() (uintptr, error) {
			var req uintptr
			return req, codeErr("MPI_Irecv", mpiIrecv(at, k, dt, prev, tag, g.ringComm, &req))
		}
		recvs = append(recvs, o)
	}
	for off := 0; off < sn || off == 0; off += per {
		k, at := min(per, sn-off), uintptr(unsafe.Add(send, off*es))
		o := g.newOp("ring send", k*es, -1)
		o.peer, o.tag = next, tag
		o.pinp(unsafe.Add(send, off*es))
		o.post = func() (uintptr, error) {
			var req uintptr
			return req, codeErr("MPI_Isend", mpiIsend(at, k, dt, next, tag, g.ringComm, &req))
		}
		sends = append(sends, o)
	}
	g.postAll(append(recvs, sends...))
	var errs []error
	for i, o := range recvs {
		<-o.done
		errs = append(errs, o.err)
		if o.err == nil && arrived != nil {
			arrived(i*per, o.recvBytes/es)
		}
	}
	for _, o := range sends {
		<-o.done
		errs = append(errs, o.err)
	}
	return errors.Join(errs...)
}

// reduceInto computes dst[i] = dst[i] op src[i] for n elements of dtype dt (Avg: the sum).
func reduceInto(dt comm.DType, op comm.Op, dst, src unsafe.Pointer, n int) {
	reduce3(dt, op, dst, dst, src, n)
}

// reduce3 computes dst[i] = a[i] op b[i] for n elements of dtype dt (Avg: the sum); dst
// may be a or b. The ops are commutative, bit for bit (IEEE addition, max, min), so the
// order of a and b does not change the result.
func reduce3(dt comm.DType, op comm.Op, dst, a, b unsafe.Pointer, n int) {
	if n == 0 {
		return
	}
	switch dt {
	case comm.Float32:
		reduceSlice(op, unsafe.Slice((*float32)(dst), n), unsafe.Slice((*float32)(a), n), unsafe.Slice((*float32)(b), n))
	case comm.Float64:
		reduceSlice(op, unsafe.Slice((*float64)(dst), n), unsafe.Slice((*float64)(a), n), unsafe.Slice((*float64)(b), n))
	case comm.Int64:
		reduceSlice(op, unsafe.Slice((*int64)(dst), n), unsafe.Slice((*int64)(a), n), unsafe.Slice((*int64)(b), n))
	}
}

func reduceSlice[T float32 | float64 | int64](op comm.Op, dst, a, b []T) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case comm.Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	case comm.Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	default:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	}
}
