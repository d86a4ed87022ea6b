package mpi

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Note [Ring over MPI messages]: on the 2-core test machine OpenMPI 4.1's MPI_Iallreduce
// (libnbc; MPI_Allreduce of coll/tuned was no better) of 64-256 MiB reached 0.1-0.14 GB/s
// of bus bandwidth at world 2, while its point-to-point messages moved 2.4 GB/s one way
// (vader's single-copy CMA); this ring reached 1.0 and 0.54 GB/s there (bench/mpi prints
// all three; the machine was shared, load average 12-18). So from WithRingBytes (4 MiB) on, AllReduce runs the ring of nccl and gloo
// over MPI_Isend/MPI_Irecv on a communicator of its own, tagged with the collective's
// sequence number: Size() segments (comm.ShardRange); Size()-1 steps of reduce-scatter, each
// sending one segment to the next rank and reducing the one received from the previous
// into place (in pieces, overlapping the transfer); then Size()-1 steps of all-gather
// passing the reduced segments on. Each
// segment is reduced once, in ring order, and then copied, so every rank ends with the
// same bits, as comm promises; the sums may differ in the last bits from MPI_Iallreduce's.

// ringChunk is the largest message of the ring: a step's segment travels in pieces of at
// most ringChunk bytes, all posted at once, so that the reduction of one piece overlaps
// the transfer of the next.
const ringChunk = 4 << 20

// ringTmp holds the ring's receive buffers between collectives, so that a training loop
// does not fault in fresh pages for every all-reduce.
var ringTmp sync.Pool

// ring all-reduces buf with op over g.ringComm, tagging its messages with seq.
func (g *Group) ring(seq uint64, buf comm.Buffer, op comm.Op) error {
	p, total, dt, err := view(buf)
	if err != nil {
		return err
	}
	n, r, es := g.size, g.rank, buf.DType().Size()
	tag := int(seq % uint64(g.e.tagUB+1))
	seg := func(k int) (unsafe.Pointer, int) {
		lo, hi := comm.ShardRange(total, n, ((k%n)+n)%n)
		return unsafe.Add(p, lo*es), hi - lo
	}
	_, most := seg(0)
	tmp, _ := ringTmp.Get().(*[]byte)
	if tmp == nil || len(*tmp) < max(1, most*es) {
		b := make([]byte, max(1, most*es))
		tmp = &b
	}
	defer ringTmp.Put(tmp)
	tp := unsafe.Pointer(&(*tmp)[0])
	for s := range n - 1 {
		sp, sn := seg(r - s)
		rp, rn := seg(r - s - 1)
		err := g.exchange(sp, sn, tp, rn, dt, es, tag, func(off, k int) {
			reduceInto(buf.DType(), op, unsafe.Add(rp, off*es), unsafe.Add(tp, off*es), k)
		})
		if err != nil {
			return fmt.Errorf("ring reduce-scatter step %d: %w", s, err)
		}
	}
	for s := range n - 1 {
		sp, sn := seg(r + 1 - s)
		rp, rn := seg(r - s)
		if err := g.exchange(sp, sn, rp, rn, dt, es, tag, nil); err != nil {
			return fmt.Errorf("ring all-gather step %d: %w", s, err)
		}
	}
	if op == comm.Avg {
		divide(buf, n)
	}
	return nil
}

// exchange sends sn elements at send to the next rank and receives rn elements from the
// previous one into recv, both in pieces of ringChunk bytes posted at once; it calls
// arrived(offset, count) for each piece received, in order, and returns once every piece
// has gone both ways.
func (g *Group) exchange(send unsafe.Pointer, sn int, recv unsafe.Pointer, rn int, dt uintptr, es, tag int, arrived func(off, n int)) error {
	next, prev := (g.rank+1)%g.size, (g.rank+g.size-1)%g.size
	per := max(1, ringChunk/es)
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
	g.ops.Add(len(recvs) + len(sends))
	g.e.calls <- func(e *engine) {
		for _, o := range recvs {
			e.post(o)
		}
		for _, o := range sends {
			e.post(o)
		}
	}
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
	if n == 0 {
		return
	}
	switch dt {
	case comm.Float32:
		reduceSlice(op, unsafe.Slice((*float32)(dst), n), unsafe.Slice((*float32)(src), n))
	case comm.Float64:
		reduceSlice(op, unsafe.Slice((*float64)(dst), n), unsafe.Slice((*float64)(src), n))
	case comm.Int64:
		reduceSlice(op, unsafe.Slice((*int64)(dst), n), unsafe.Slice((*int64)(src), n))
	}
}

func reduceSlice[T float32 | float64 | int64](op comm.Op, dst, src []T) {
	src = src[:len(dst)]
	switch op {
	case comm.Max:
		for i, v := range src {
			dst[i] = max(dst[i], v)
		}
	case comm.Min:
		for i, v := range src {
			dst[i] = min(dst[i], v)
		}
	default:
		for i, v := range src {
			dst[i] += v
		}
	}
}
