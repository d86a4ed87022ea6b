package comm

import (
	"testing"
	"time"
)

// FuzzStatusReply checks that decodeStatus takes any reply a peer sends, of any length,
// without a panic, and that what encodeStatus writes for a record decodes to that record.
func FuzzStatusReply(f *testing.F) {
	f.Add([]byte{}, uint64(7), uint8(kindAllReduce), uint8(Float32), uint8(stateRunning), uint32(1000), int64(4000))
	f.Add(make([]byte, statusReplySize), uint64(1<<63), uint8(0), uint8(255), uint8(9), uint32(1<<32-1), int64(-1))
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"), uint64(0), uint8(1), uint8(1), uint8(2), uint32(0), int64(0))
	f.Fuzz(func(t *testing.T, wire []byte, seq uint64, k, dt, st uint8, count uint32, nbytes int64) {
		if _, ps := decodeStatus(3, wire); len(ps.Recent) > flightReply || ps.Rank != 3 {
			t.Fatalf("decoded %d records for rank %d", len(ps.Recent), ps.Rank)
		}
		g := &group{}
		start := time.Now().Add(-time.Second)
		g.flight[0] = opRecord{seq: seq, kind: kind(k), dtype: DType(dt), state: opState(st), count: int(count), bytes: int(nbytes), start: start, end: start.Add(time.Millisecond)}
		g.flightN = 1
		g.issued.Store(seq)
		id, ps := decodeStatus(3, g.encodeStatus(42))
		if id != 42 || !ps.Answered || ps.Issued != seq || len(ps.Recent) != 1 {
			t.Fatalf("round trip: id %d, status %+v", id, ps)
		}
		r := ps.Recent[0]
		if r.Seq != seq || r.Op != kind(k).String() || r.DType != DType(dt) || r.State != opState(st).String() ||
			r.Count != int(count) || r.Bytes != int(nbytes) || r.Age < time.Second {
			t.Fatalf("record %+v did not survive the round trip as %+v", g.flight[0], r)
		}
		if st != uint8(stateRunning) && r.Took != time.Millisecond {
			t.Fatalf("took %v, want 1ms", r.Took)
		}
	})
}
