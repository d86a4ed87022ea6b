//go:build linux

package netbed

// A minimal client of the kernel's netfilter queue (nfnetlink_queue) over a raw netlink
// socket: bind one queue, ask for packet metadata only (no payload is copied), read the
// queued packets' ids, and accept every packet up to an id with one batch verdict. Only what
// the delay holder (hold_linux.go) needs.

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Constants of linux/netfilter/nfnetlink.h and nfnetlink_queue.h.
const (
	nfnlSubsysQueue = 3

	nfqnlMsgPacket       = 0
	nfqnlMsgConfig       = 2
	nfqnlMsgVerdictBatch = 3

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2
	nfqaTimestamp  = 4

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1
	nfqaCfgFGSO     = 4 // hand GSO packets over whole instead of segmenting them

	nfAccept = 1

	solNetlink       = 270
	netlinkNoENOBUFS = 5
)

// nfqueue is one bound queue on a netlink socket created inside a host's namespace.
type nfqueue struct {
	fd  int
	num uint16
	seq uint32
}

// openQueue binds queue num in the calling thread's network namespace, with metadata-only
// copies, GSO packets whole and room for maxLen waiting packets.
func openQueue(num uint16, maxLen uint32) (*nfqueue, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netbed: nfqueue socket: %w", err)
	}
	q := &nfqueue{fd: fd, num: num}
	if err := q.setup(maxLen); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return q, nil
}

func (q *nfqueue) setup(maxLen uint32) error {
	if err := unix.Bind(q.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netbed: nfqueue bind: %w", err)
	}
	// A large receive buffer (a burst of packet notices must not overflow it) and no ENOBUFS
	// error when it does (the kernel then drops the packet, as a full link would).
	unix.SetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	unix.SetsockoptInt(q.fd, solNetlink, netlinkNoENOBUFS, 1)
	// Bounds the wait for the configuration's acknowledgement.
	tv := unix.NsecToTimeval(50e6)
	if err := unix.SetsockoptTimeval(q.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("netbed: nfqueue SO_RCVTIMEO: %w", err)
	}
	var b []byte
	b = nlattr(b, nfqaCfgCmd, []byte{nfqnlCfgCmdBind, 0, 0, 0})
	params := make([]byte, 5) // copy_range 0, copy_mode META
	params[4] = nfqnlCopyMeta
	b = nlattr(b, nfqaCfgParams, params)
	b = nlattr(b, nfqaCfgQueueMax, binary.BigEndian.AppendUint32(nil, maxLen))
	b = nlattr(b, nfqaCfgFlags, binary.BigEndian.AppendUint32(nil, nfqaCfgFGSO))
	b = nlattr(b, nfqaCfgMask, binary.BigEndian.AppendUint32(nil, nfqaCfgFGSO))
	if err := q.send(nfqnlMsgConfig, unix.NLM_F_ACK, b); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(q.fd, buf, 0)
	if err != nil {
		return fmt.Errorf("netbed: nfqueue config ack: %w", err)
	}
	if n < unix.NLMSG_HDRLEN+4 || binary.NativeEndian.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("netbed: nfqueue config: unexpected reply (%d bytes)", n)
	}
	if e := int32(binary.NativeEndian.Uint32(buf[unix.NLMSG_HDRLEN:])); e != 0 {
		return fmt.Errorf("netbed: nfqueue bind queue %d: %w", q.num, unix.Errno(-e))
	}
	return nil
}

// send writes one nfnetlink_queue message of type typ with the attributes attrs.
func (q *nfqueue) send(typ uint16, flags uint16, attrs []byte) error {
	q.seq++
	msg := make([]byte, unix.NLMSG_HDRLEN+4, unix.NLMSG_HDRLEN+4+len(attrs))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.NLMSG_HDRLEN+4+len(attrs)))
	binary.NativeEndian.PutUint16(msg[4:], nfnlSubsysQueue<<8|typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(msg[8:], q.seq)
	// nfgenmsg: family AF_UNSPEC, version 0, the queue number (big endian).
	binary.BigEndian.PutUint16(msg[unix.NLMSG_HDRLEN+2:], q.num)
	msg = append(msg, attrs...)
	if err := unix.Sendto(q.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netbed: nfqueue send: %w", err)
	}
	return nil
}

// acceptUpTo accepts every packet of the queue whose id is id or earlier. It is called by
// one goroutine at a time (the releaser); seq is only used by it after setup.
func (q *nfqueue) acceptUpTo(id uint32) error {
	v := binary.BigEndian.AppendUint32(nil, nfAccept)
	v = binary.BigEndian.AppendUint32(v, id)
	return q.send(nfqnlMsgVerdictBatch, 0, nlattr(nil, nfqaVerdictHdr, v))
}

// notice is one queued packet: its id, and when it arrived (CLOCK_REALTIME ns, from the
// packet's kernel timestamp; 0 when the packet had none).
type notice struct {
	id      uint32
	arrived int64
}

// notices appends the packet notices in buf (one netlink read) to ns.
func notices(buf []byte, ns []notice) []notice {
	for len(buf) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(buf))
		if l < unix.NLMSG_HDRLEN || l > len(buf) {
			return ns
		}
		typ := binary.NativeEndian.Uint16(buf[4:])
		if typ == nfnlSubsysQueue<<8|nfqnlMsgPacket && l >= unix.NLMSG_HDRLEN+4 {
			var n notice
			ok := false
			attrs := buf[unix.NLMSG_HDRLEN+4 : l]
			for len(attrs) >= 4 {
				al := int(binary.NativeEndian.Uint16(attrs))
				at := binary.NativeEndian.Uint16(attrs[2:]) & 0x3fff
				if al < 4 || al > len(attrs) {
					break
				}
				switch {
				case at == nfqaPacketHdr && al >= 8:
					n.id, ok = binary.BigEndian.Uint32(attrs[4:]), true
				case at == nfqaTimestamp && al >= 20: // struct { __be64 sec, usec }
					sec, usec := binary.BigEndian.Uint64(attrs[4:]), binary.BigEndian.Uint64(attrs[12:])
					n.arrived = int64(sec)*1e9 + int64(usec)*1e3
				}
				attrs = attrs[min(len(attrs), (al+3)&^3):]
			}
			if ok {
				ns = append(ns, n)
			}
		}
		buf = buf[min(len(buf), (l+3)&^3):]
	}
	return ns
}

// nlattr appends a netlink attribute (length, type, value, padding to 4 bytes) to b.
func nlattr(b []byte, typ uint16, v []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
