package nccl

import (
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// AllGatherDeviceAfter gathers count elements of type dt at device address src from every
// rank into dst (count·Size() elements, rank r's at element r·count), on the group's stream
// and ordered by events as AllReduceDeviceAfter: the stream waits for wait (0 for none)
// first and records done (0 for none) after. NCCL's equal shards: the caller pads (ZeRO-3's
// units, cuda/devzero).
func (g *Group) AllGatherDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, wait, done driver.Event) DeviceWork {
	o := &task{kind: kAllGather, dev: dst, devSrc: src, devN: count, devType: dt, waitEv: wait, doneEv: done, enq: make(chan struct{})}
	g.coll.submit(o)
	return o
}

// ReduceScatterDeviceAfter reduces count·Size() elements of type dt at device address src
// over every rank and leaves this rank's count elements (elements [rank·count,
// (rank+1)·count) of the reduction) at dst, on the group's stream and ordered by events as
// AllReduceDeviceAfter.
func (g *Group) ReduceScatterDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, op comm.Op, wait, done driver.Event) DeviceWork {
	o := &task{kind: kReduceScatter, dev: dst, devSrc: src, devN: count, devType: dt, op: op, waitEv: wait, doneEv: done, enq: make(chan struct{})}
	g.coll.submit(o)
	return o
}

// devCollective issues a device-resident collective on the worker's stream: in place for an
// all-reduce, from devSrc into dev for the all-gather and the reduce-scatter.
func (w *worker) devCollective(o *task) error {
	s := uintptr(w.stream)
	switch o.kind {
	case kAllGather:
		return w.comm.AllGather(uintptr(o.devSrc), uintptr(o.dev), o.devN, o.devType, s)
	case kReduceScatter:
		return w.comm.ReduceScatter(uintptr(o.devSrc), uintptr(o.dev), o.devN, o.devType, ncclOp(o.op), s)
	}
	return w.comm.AllReduce(uintptr(o.dev), uintptr(o.dev), o.devN, o.devType, ncclOp(o.op), s)
}
