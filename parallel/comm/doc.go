// Package comm is the process group: asynchronous collectives (all-reduce, broadcast,
// all-gather, reduce-scatter, barrier, send/recv) over TCP, shared-memory or in-process
// transports. InitFromEnv builds a group from the launcher's environment (torchrun's, srun's,
// mpirun's variables: package launchenv) through the rendezvous store rank 0 hosts (package
// store, its connections authenticated by package auth).
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
// Buffers are []float32, []float64 or []int64 viewed through [F32], [F64] and [I64], or
// 16-bit floats ([]uint16) through [BF16] and [F16] (see Note 16-bit reductions in buffer.go):
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
// TCP otherwise; GP_COMM_TRANSPORT=tcp|shm (or WithTransport) forces one. A job on several
// hosts with several ranks on some host runs its collectives hierarchically: shared memory
// inside each host, TCP among one rank per host (see Note [Hierarchical collectives] in
// hier.go; GP_COMM_HIERARCHY=0|1 overrides the choice). NewLocalGroups runs ranks as
// goroutines of one process.
//
// Stalls: a collective that waits past the warning threshold (WithWarnAfter,
// GP_COMM_WARN_AFTER; default 30 s or half the timeout) makes its rank ask every peer what
// it is doing (see Note [Flight recorder] in flight.go: each rank keeps its last 16
// collectives) and log, once per collective, a [StallReport] naming the ranks that have not
// started it and the last collective each ran:
//
//	level=WARN msg="comm: collective stalled" rank=0 op=all-reduce seq=4 waited=201ms
//	  not_arrived=[1] no_answer=[] report="rank 0: all-reduce seq 4 (4.0 KiB) waited 201ms;
//	  not arrived: rank 1 (issued up to seq 3; last: seq 3 broadcast float64 x 512 (4.0 KiB),
//	  completed in 136µs, 201ms ago)"
//
// A peer that does not answer within the probe's bound (at most 2 s) is listed under "no
// answer" (its process is stopped or wedged). At the timeout (WithTimeout, GP_COMM_TIMEOUT;
// default 30 minutes) the collective fails on every rank with a [*TimeoutError] carrying the
// same report ("comm: timeout: after 2s: rank 0: all-reduce seq 4 ..."; the peers receive its
// text in their *RemoteError).
//
// Environment variables read by InitFromEnv (explicit options win): GP_COMM_TIMEOUT,
// GP_COMM_WARN_AFTER (0 turns the warning off) and GP_RDZV_TIMEOUT (the rendezvous and
// connections, WithConnectTimeout; default 5 minutes) hold Go durations ("90s", "10m"); a
// bad value fails InitFromEnv naming the variable and the value. Set GP_COMM_DEBUG=1 to log
// every collective (rank, op, sequence number, bytes, time).
package comm
