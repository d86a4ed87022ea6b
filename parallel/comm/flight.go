package comm

import (
	"context"
	"encoding/binary"
	"time"
)

// Note [Flight recorder]
//
// A collective that does not complete is usually a rank that never issued it (it is stuck in
// user code, or took another branch) or one still busy with an earlier collective. To name
// that rank, every group keeps a small ring of the collectives it started (seq, op, dtype,
// bytes, start, end: flightSize of them), and answers its peers' questions about it: when
// a collective waits past the warning threshold (WithWarnAfter), and again when it times out,
// the waiting rank sends a status request (tag tagStatus) to every peer, and each peer's
// responder (one goroutine per peer, beside the leave watchers) answers with the highest
// sequence number it has issued and its last flightReply records (tag tagStatusReply). A
// peer that has not started the waiting rank's collective has "not arrived".
//
// The questions travel over the transport's tagged messages, like the leave notice, so the
// mechanism is the same for TCP, shared memory (whose control plane is TCP) and in-process
// groups, costs nothing until a collective stalls, and does not depend on the data streams,
// which may be the very thing that is stuck. Ages rather than timestamps cross the wire, so
// the report does not depend on the hosts' clocks agreeing. A peer whose responder does not
// answer within the probe's bound (its process stopped, or wedged) is reported as such.

// Tags of the status protocol (negative tags belong to the package; tagLeave is -1).
const (
	tagStatus      int64 = -2 // request: 8 bytes, the request id
	tagStatusReply int64 = -3 // reply: statusReplySize bytes (see encodeStatus)
)

const (
	flightSize       = 16 // collectives kept per rank
	flightReply      = 4  // collectives sent in a status reply
	recordWireSize   = 40
	statusHeaderSize = 24 // request id, issued, records that follow
	statusReplySize  = statusHeaderSize + flightReply*recordWireSize
)

// opState is where a collective of the flight recorder is.
type opState uint8

const (
	stateRunning opState = iota + 1
	stateCompleted
	stateFailed
)

func (s opState) String() string {
	switch s {
	case stateRunning:
		return "running"
	case stateCompleted:
		return "completed"
	case stateFailed:
		return "failed"
	}
	return "unknown"
}

// opRecord is one collective in the flight recorder.
type opRecord struct {
	seq        uint64
	kind       kind
	dtype      DType
	state      opState
	count      int
	bytes      int
	start, end time.Time
}

// record adds w to the flight recorder as running.
func (g *group) record(w *work) {
	r := opRecord{seq: w.seq, kind: w.kind, state: stateRunning, bytes: w.bytes(), start: time.Now()}
	if w.buf != nil {
		r.dtype, r.count = w.buf.DType(), w.buf.Len()
	}
	if w.kind == kindReduceScatter {
		r.count = w.src.Len()
	}
	g.flightMu.Lock()
	g.flight[g.flightN%flightSize] = r
	g.flightN++
	g.flightMu.Unlock()
}

// recordEnd marks the newest record, collective seq, completed or failed.
func (g *group) recordEnd(seq uint64, err error) {
	g.flightMu.Lock()
	defer g.flightMu.Unlock()
	if g.flightN == 0 {
		return
	}
	r := &g.flight[(g.flightN-1)%flightSize]
	if r.seq != seq {
		return
	}
	r.state, r.end = stateCompleted, time.Now()
	if err != nil {
		r.state = stateFailed
	}
}

// recent returns up to n of the newest records, newest first.
func (g *group) recent(n int) []opRecord {
	g.flightMu.Lock()
	defer g.flightMu.Unlock()
	n = int(min(uint64(n), g.flightN, flightSize))
	out := make([]opRecord, n)
	for i := range out {
		out[i] = g.flight[(g.flightN-1-uint64(i))%flightSize]
	}
	return out
}

// encodeStatus is the reply to status request id: id, the highest sequence number issued,
// the number of records, then the newest flightReply records, newest first, each
// seq(8) kind(1) dtype(1) state(1) pad(1) count(4, saturated) bytes(8) age(8 ns since it
// started) took(8 ns; 0 while running).
func (g *group) encodeStatus(id uint64) []byte {
	b := make([]byte, statusReplySize)
	recs := g.recent(flightReply)
	now := time.Now()
	binary.LittleEndian.PutUint64(b[0:], id)
	binary.LittleEndian.PutUint64(b[8:], g.issued.Load())
	binary.LittleEndian.PutUint64(b[16:], uint64(len(recs)))
	for i, r := range recs {
		p := b[statusHeaderSize+i*recordWireSize:]
		binary.LittleEndian.PutUint64(p[0:], r.seq)
		p[8], p[9], p[10] = byte(r.kind), byte(r.dtype), byte(r.state)
		binary.LittleEndian.PutUint32(p[12:], uint32(min(r.count, 1<<32-1)))
		binary.LittleEndian.PutUint64(p[16:], uint64(r.bytes))
		binary.LittleEndian.PutUint64(p[24:], uint64(now.Sub(r.start)))
		if r.state != stateRunning {
			binary.LittleEndian.PutUint64(p[32:], uint64(r.end.Sub(r.start)))
		}
	}
	return b
}

// decodeStatus parses a reply of encodeStatus into peer's state. A reply shorter than its
// header is not an answer (id 0 matches no probe); the record count is bounded by the
// records the reply holds, whatever it claims.
func decodeStatus(peer int, b []byte) (id uint64, ps PeerStatus) {
	if len(b) < statusHeaderSize {
		return 0, PeerStatus{Rank: peer}
	}
	id = binary.LittleEndian.Uint64(b[0:])
	ps = PeerStatus{Rank: peer, Answered: true, Issued: binary.LittleEndian.Uint64(b[8:])}
	n := int(min(binary.LittleEndian.Uint64(b[16:]), flightReply, uint64((len(b)-statusHeaderSize)/recordWireSize)))
	for i := range n {
		p := b[statusHeaderSize+i*recordWireSize:]
		ps.Recent = append(ps.Recent, OpRecord{
			Seq:   binary.LittleEndian.Uint64(p[0:]),
			Op:    kind(p[8]).String(),
			DType: DType(p[9]),
			State: opState(p[10]).String(),
			Count: int(binary.LittleEndian.Uint32(p[12:])),
			Bytes: int(binary.LittleEndian.Uint64(p[16:])),
			Age:   time.Duration(binary.LittleEndian.Uint64(p[24:])),
			Took:  time.Duration(binary.LittleEndian.Uint64(p[32:])),
		})
	}
	return id, ps
}

// answerStatus runs one responder per peer until ctx ends (Close): it answers each status
// request of the peer with this rank's flight recorder.
func (g *group) answerStatus(ctx context.Context) {
	g.eachPeer(func(p int) {
		var req [8]byte
		for g.t.RecvMsg(ctx, p, tagStatus, req[:]) == nil {
			// A failed send means the transport is failing too; the asking rank then
			// reports this rank as not answering, or sees its failure.
			if g.t.SendMsg(ctx, p, tagStatusReply, g.encodeStatus(binary.LittleEndian.Uint64(req[:]))) != nil {
				return
			}
		}
	})
}

// probe asks every peer for its state (see Note [Flight recorder]) and waits for the answers
// until wait passes or ctx ends. Probes of one group run one at a time, so that a reply
// cannot be taken by another probe.
func (g *group) probe(ctx context.Context, wait time.Duration) []PeerStatus {
	g.probeMu.Lock()
	defer g.probeMu.Unlock()
	g.probeID++
	id := g.probeID
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], id)
	out := make([]PeerStatus, 0, g.size-1)
	for p := range g.size {
		if p != g.rank {
			out = append(out, PeerStatus{Rank: p})
			_ = g.t.SendMsg(ctx, p, tagStatus, req[:]) // a peer that cannot be asked does not answer
		}
	}
	done := make(chan PeerStatus)
	for i := range out {
		go func(p int) {
			b := make([]byte, statusReplySize)
			for g.t.RecvMsg(ctx, p, tagStatusReply, b) == nil {
				// Replies to earlier probes that gave up on this peer are stale: skip them.
				if got, ps := decodeStatus(p, b); got == id {
					done <- ps
					return
				}
			}
			done <- PeerStatus{Rank: p}
		}(out[i].Rank)
	}
	for range out {
		ps := <-done
		for i := range out {
			if out[i].Rank == ps.Rank {
				out[i] = ps
			}
		}
	}
	return out
}

// probeWait bounds a probe: a round trip takes microseconds to milliseconds, so a peer
// that does not answer within it is stopped or wedged.
func probeWait(timeout time.Duration) time.Duration {
	return min(2*time.Second, max(100*time.Millisecond, timeout/10))
}
