package nccl

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

func (w *worker) validate(o *task) error {
	n := w.g.size
	if o.kind == kAllReduce || o.kind == kReduceScatter {
		if o.op < comm.Sum || o.op > comm.Min {
			return fmt.Errorf("reduction %v: %w", o.op, comm.ErrInvalid)
		}
	}
	if o.dev != 0 || o.kind == kBarrier {
		return nil
	}
	if o.buf == nil {
		return fmt.Errorf("nil buffer: %w", comm.ErrInvalid)
	}
	if _, err := ncclType(o.buf.DType()); err != nil {
		return err
	}
	switch o.kind {
	case kBroadcast:
		if o.root < 0 || o.root >= n {
			return fmt.Errorf("root %d outside [0,%d): %w", o.root, n, comm.ErrInvalid)
		}
	case kSend, kRecv:
		if o.root < 0 || o.root >= n || o.root == w.g.rank || o.tag < 0 {
			return fmt.Errorf("peer %d tag %d: %w", o.root, o.tag, comm.ErrInvalid)
		}
	case kAllGather, kReduceScatter:
		if o.src == nil || o.src.DType() != o.buf.DType() {
			return fmt.Errorf("src and dst types differ: %w", comm.ErrInvalid)
		}
		total, shard := o.buf.Len(), o.src
		if o.kind == kReduceScatter {
			total, shard = o.src.Len(), o.buf
		}
		lo, hi := comm.ShardRange(total, n, w.g.rank)
		if shard.Len() != hi-lo {
			return fmt.Errorf("shard of %d elements, want %d of %d: %w", shard.Len(), hi-lo, total, comm.ErrInvalid)
		}
	}
	return nil
}

func ncclType(d comm.DType) (libnccl.DataType, error) {
	switch d {
	case comm.Float32:
		return libnccl.Float32, nil
	case comm.Float64:
		return libnccl.Float64, nil
	case comm.Int64:
		return libnccl.Int64, nil
	case comm.BFloat16:
		return libnccl.Bfloat16, nil
	case comm.Float16:
		return libnccl.Float16, nil
	}
	return 0, fmt.Errorf("dtype %v: %w", d, comm.ErrInvalid)
}

func ncclOp(o comm.Op) libnccl.RedOp {
	switch o {
	case comm.Avg:
		return libnccl.Avg
	case comm.Max:
		return libnccl.Max
	case comm.Min:
		return libnccl.Min
	}
	return libnccl.Sum
}

// hostBytes views a comm buffer's elements as bytes (no copy).
func hostBytes(b comm.Buffer) []byte {
	switch v := b.(type) {
	case comm.F32:
		if len(v) > 0 {
			return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
		}
	case comm.F64:
		if len(v) > 0 {
			return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
		}
	case comm.I64:
		if len(v) > 0 {
			return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
		}
	}
	return nil
}

// ncclRemoteError is the ncclResult_t NCCL returns when a peer's process exited or its
// connection failed.
const ncclRemoteError = 6

// exec runs inner for one operation on the worker's thread, aborting the communicator when
// it has not returned within the timeout: the timer covers a call that blocks until the peers
// arrive (as the fake NCCL of cuda/cudatest does), and wait enforces the timeout while the
// stream runs a host operation (a device collective's completion is polled in flight,
// inflight.go).
func (w *worker) exec(o *task, inner func(*task) error) error {
	var mu sync.Mutex
	done := false
	t := time.AfterFunc(w.timeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			w.abort(fmt.Errorf("%s: %w after %v", o.describe(), comm.ErrTimeout, w.timeout))
		}
	})
	err := inner(o)
	mu.Lock()
	done = true
	mu.Unlock()
	t.Stop()
	return w.opError(o, err)
}

// opError names the operation in err; NCCL's remote error is reported as comm.ErrPeerGone,
// as comm's own backends report a dead peer.
func (w *worker) opError(o *task, err error) error {
	if err == nil {
		return nil
	}
	if ne := (*libnccl.Error)(nil); errors.As(err, &ne) && ne.Code == ncclRemoteError {
		return fmt.Errorf("%s: %w: %w", o.describe(), comm.ErrPeerGone, err)
	}
	return fmt.Errorf("%s: %w", o.describe(), err)
}

// execInner runs a host operation (staged through pinned memory) or a barrier to completion.
func (w *worker) execInner(o *task) error {
	c, s := w.g.ctx, uintptr(w.stream)
	if o.kind == kBarrier {
		if err := w.ensure(4); err != nil {
			return err
		}
		if err := c.MemsetD32Async(w.dev, 0, 1, w.stream); err != nil {
			return err
		}
		if err := w.comm.AllReduce(uintptr(w.dev), uintptr(w.dev), 1, libnccl.Float32, libnccl.Sum, s); err != nil {
			return err
		}
		return w.wait(o)
	}
	dt, _ := ncclType(o.buf.DType())
	es := o.buf.DType().Size()
	n, rank := w.g.size, w.g.rank
	hb := hostBytes(o.buf)
	switch o.kind {
	case kAllReduce, kBroadcast, kSend, kRecv:
		cnt := o.buf.Len()
		if err := w.ensure(cnt * es); err != nil {
			return err
		}
		if o.kind != kRecv {
			copy(w.host, hb)
			if err := c.CopyHtoDAsync(w.dev, w.hostPtr, cnt*es, w.stream); err != nil {
				return err
			}
		}
		var err error
		d := uintptr(w.dev)
		switch o.kind {
		case kAllReduce:
			err = w.comm.AllReduce(d, d, cnt, dt, ncclOp(o.op), s)
		case kBroadcast:
			err = w.comm.Broadcast(d, d, cnt, dt, o.root, s)
		case kSend:
			err = w.comm.Send(d, cnt, dt, o.root, s)
		case kRecv:
			err = w.comm.Recv(d, cnt, dt, o.root, s)
		}
		if err != nil {
			return err
		}
		if o.kind == kSend {
			return w.wait(o)
		}
		if err := c.CopyDtoHAsync(w.hostPtr, w.dev, cnt*es, w.stream); err != nil {
			return err
		}
		if err := w.wait(o); err != nil {
			return err
		}
		copy(hb, w.host[:cnt*es])
		return nil
	case kAllGather:
		total := o.buf.Len()
		m := (total + n - 1) / n
		if err := w.ensure((m + m*n) * es); err != nil {
			return err
		}
		copy(w.host, hostBytes(o.src))
		if err := c.CopyHtoDAsync(w.dev, w.hostPtr, m*es, w.stream); err != nil {
			return err
		}
		recv := w.dev + driverPtr(m*es)
		if err := w.comm.AllGather(uintptr(w.dev), uintptr(recv), m, dt, s); err != nil {
			return err
		}
		if err := c.CopyDtoHAsync(w.hostPtr, recv, m*n*es, w.stream); err != nil {
			return err
		}
		if err := w.wait(o); err != nil {
			return err
		}
		for i := range n {
			lo, hi := comm.ShardRange(total, n, i)
			copy(hb[lo*es:hi*es], w.host[i*m*es:])
		}
		return nil
	case kReduceScatter:
		total := o.src.Len()
		m := (total + n - 1) / n
		if err := w.ensure((m*n + m) * es); err != nil {
			return err
		}
		sb := hostBytes(o.src)
		clear(w.host[:m*n*es])
		for i := range n {
			lo, hi := comm.ShardRange(total, n, i)
			copy(w.host[i*m*es:], sb[lo*es:hi*es])
		}
		if err := c.CopyHtoDAsync(w.dev, w.hostPtr, m*n*es, w.stream); err != nil {
			return err
		}
		recv := w.dev + driverPtr(m*n*es)
		if err := w.comm.ReduceScatter(uintptr(w.dev), uintptr(recv), m, dt, ncclOp(o.op), s); err != nil {
			return err
		}
		if err := c.CopyDtoHAsync(w.hostPtr, recv, m*es, w.stream); err != nil {
			return err
		}
		if err := w.wait(o); err != nil {
			return err
		}
		lo, hi := comm.ShardRange(total, n, rank)
		copy(hb, w.host[:(hi-lo)*es])
		return nil
	}
	return fmt.Errorf("unknown operation %d", o.kind)
}
