// Package comm is the process group: asynchronous collectives (all-reduce, broadcast,
// all-gather, reduce-scatter, barrier, send/recv) over TCP, shared-memory or in-process
// transports, and the torchrun-compatible rendezvous that builds a group from the environment.
//
// Every collective is issued in the same order on every rank and returns a [Work]; results
// are ready once Work.Wait returns nil. A collective that fails (a peer died, a timeout, ranks
// that disagree on the operation or its size) poisons the group: every later operation
// returns the same error, as with torch's process groups after a NCCL abort.
//
// Leaving: a rank that finished calls Group.Close; a rank that fails calls [Abort] with its
// error, so that its peers do not wait for it until their timeout:
//
//	if err != nil {
//		comm.Abort(ctx, g, err) // peers fail: "comm: rank 1 aborted: <err>"
//		return err
//	}
//
// A collective still pending on a peer when a rank aborts, closes (without having completed
// that collective) or dies fails at once with an error naming that rank: an [*AbortError]
// with the reason, or a [*PeerGoneError]. Close never waits on its peers beyond
// WithCloseTimeout.
//
// Buffers are []float32, []float64 or []int64 viewed through [F32], [F64] and [I64]:
//
//	w := g.AllReduce(comm.F32(grad), comm.Avg)
//	if err := w.Wait(ctx); err != nil { ... }
//
// Layout rules: all-reduce and broadcast work in place on buffers of equal length on every
// rank. ReduceScatter and AllGather split a flat buffer of total elements into Size()
// contiguous shards in rank order; shard i has total/Size() elements, plus one when
// i < total%Size() (see [ShardRange]). When total is divisible by Size() all shards are equal,
// which is what ZeRO's padding guarantees.
//
// Results are deterministic for a given world size, buffer length and transport: every run
// reduces elements in the same order, and every rank receives bit-identical results. (Shared
// memory reduces large buffers in rank order through a staging area, TCP along the ring: from
// world 3 up, float sums may differ in the last bits between the two.)
//
// Transports: between processes, InitFromEnv uses shared memory when every rank runs on
// one host (rings under /dev/shm, with TCP control connections that detect a dead peer) and
// TCP otherwise; GP_COMM_TRANSPORT=tcp|shm (or WithTransport) forces one. NewLocalGroups
// runs ranks as goroutines of one process.
//
// Set GP_COMM_DEBUG=1 to log every collective (rank, op, sequence number, bytes, time).
package comm
