package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
)

// Transport moves frames between the ranks of one group. Collective algorithms run on top of
// it (see NewGroup); the TCP and in-process transports implement it, and tests substitute
// transports that drop, delay or kill.
//
// Streams are independent ordered byte pipes between each pair of ranks, numbered
// 0..Streams()-1. At most one Send and one Recv may be in flight per (peer, stream) at a time.
type Transport interface {
	// Rank is this process's rank, Size the number of ranks.
	Rank() int
	Size() int
	// Streams is the number of streams to each peer.
	Streams() int
	// Send writes one frame (header h with Len = len(b), payload b) to peer on stream s. It
	// does not modify h, which concurrent Sends may share. b may be reused when Send returns.
	Send(peer, s int, h *Header, b []byte) error
	// Recv reads one frame from peer on stream s into h and b. When the frame's payload length
	// differs from len(b) it returns an error wrapping ErrMismatch without reading the payload.
	Recv(peer, s int, h *Header, b []byte) error
	// SendMsg and RecvMsg carry tagged point-to-point messages, independent of the streams
	// and of the order of collectives. RecvMsg needs len(b) to equal the message's length.
	// Messages from one peer arrive in the order it sent them, before its Close takes
	// effect. Negative tags belong to the group's own protocols (its leave notice, tag -1;
	// the stall probe's status request and reply, -2 and -3: see flight.go).
	SendMsg(ctx context.Context, peer int, tag int64, b []byte) error
	RecvMsg(ctx context.Context, peer int, tag int64, b []byte) error
	// Abort makes every pending and later Send and Recv fail with err. With notify, the
	// transport also tells the peers, which abort with a RemoteError (an *AbortError when err
	// is this rank's own Abort). Only the first call counts.
	Abort(err error, notify bool)
	// Close releases the transport after telling the peers this rank is leaving.
	Close(ctx context.Context) error
}

// Header precedes every frame on a stream. It carries the collective's identity, so that a
// receiver detects ranks that disagree (the desync check) before it reads any payload.
type Header struct {
	Kind  uint8  // collective kind
	DType uint8  // element type
	Op    uint8  // reduction op (0 when none)
	Root  uint16 // broadcast root
	Seq   uint64 // collective sequence number, identical across ranks
	Count uint64 // total element count of the collective on the sender
	Len   uint32 // payload bytes of this frame
}

const headerSize = 32

func (h *Header) put(b []byte) {
	b[0], b[1], b[2], b[3] = 0x67, h.Kind, h.DType, h.Op
	binary.LittleEndian.PutUint16(b[4:], h.Root)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], h.Seq)
	binary.LittleEndian.PutUint64(b[16:], h.Count)
	binary.LittleEndian.PutUint32(b[24:], h.Len)
	binary.LittleEndian.PutUint32(b[28:], 0)
}

func (h *Header) get(b []byte) error {
	if b[0] != 0x67 {
		return fmt.Errorf("%w: corrupt frame header (magic %#x)", ErrMismatch, b[0])
	}
	h.Kind, h.DType, h.Op = b[1], b[2], b[3]
	h.Root = binary.LittleEndian.Uint16(b[4:])
	h.Seq = binary.LittleEndian.Uint64(b[8:])
	h.Count = binary.LittleEndian.Uint64(b[16:])
	h.Len = binary.LittleEndian.Uint32(b[24:])
	return nil
}

// sameOp reports whether two headers describe the same collective (ignoring Len).
func (h *Header) sameOp(o *Header) bool {
	return h.Kind == o.Kind && h.DType == o.DType && h.Op == o.Op && h.Root == o.Root &&
		h.Seq == o.Seq && h.Count == o.Count
}

func (h *Header) String() string {
	s := fmt.Sprintf("%s seq %d %s x %d", kind(h.Kind), h.Seq, DType(h.DType), h.Count)
	if h.Op != 0 {
		s += " " + Op(h.Op).String()
	}
	if kind(h.Kind) == kindBroadcast {
		s += fmt.Sprintf(" root %d", h.Root)
	}
	return s
}

// mailbox queues tagged point-to-point messages until a receiver takes them.
type mailbox struct {
	mu    sync.Mutex
	boxes map[mailKey]chan []byte
}

type mailKey struct {
	peer int
	tag  int64
}

func (m *mailbox) box(peer int, tag int64) chan []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.boxes == nil {
		m.boxes = make(map[mailKey]chan []byte)
	}
	k := mailKey{peer, tag}
	c, ok := m.boxes[k]
	if !ok {
		c = make(chan []byte, 1024)
		m.boxes[k] = c
	}
	return c
}

// take waits for the next message from peer with tag and copies it into b.
// A message already queued is taken even when ctx has ended (not when the transport has
// aborted): the group relies on that to deliver what a peer sent before it left (leave.go).
func (m *mailbox) take(ctx context.Context, peer int, tag int64, b []byte, abort <-chan struct{}, abortErr func() error) error {
	select {
	case <-abort:
		return abortErr()
	default:
	}
	box := m.box(peer, tag)
	select {
	case msg := <-box:
		return takeMsg(peer, tag, msg, b)
	default:
	}
	select {
	case msg := <-box:
		return takeMsg(peer, tag, msg, b)
	case <-ctx.Done():
		return ctxErr(ctx)
	case <-abort:
		return abortErr()
	}
}

func takeMsg(peer int, tag int64, msg, b []byte) error {
	if len(msg) != len(b) {
		return fmt.Errorf("%w: message from rank %d tag %d has %d bytes, receive buffer %d", ErrMismatch, peer, tag, len(msg), len(b))
	}
	copy(b, msg)
	return nil
}

func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
	return fmt.Errorf("%w: %w", ErrAborted, ctx.Err())
}

// vetFrame decodes a received frame header from raw into h for RecvView: check, when not
// nil, vets it, and its payload must be n bytes.
func vetFrame(h *Header, raw []byte, n int, check func(*Header) error) error {
	if err := h.get(raw); err != nil {
		return err
	}
	if check != nil {
		if err := check(h); err != nil {
			return err
		}
	}
	if int(h.Len) != n {
		return fmt.Errorf("%w: frame of %d bytes, buffer of %d", ErrMismatch, h.Len, n)
	}
	return nil
}
