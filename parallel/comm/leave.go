package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// The leave notice. A rank that closes its group tells every peer, through the transport's
// tagged messages (one mechanism for every transport), the sequence number of the last
// collective it completed. A collective with a higher number can never complete on the
// peers, since this rank will not take part: the peers fail it at once (the one in progress,
// or the next one when it starts) with a PeerGoneError naming this rank, instead of waiting
// for it until their timeout. A rank that leaves after the last collective, the clean case,
// fails nothing. The data a leaving rank sent for its completed collectives is already in
// flight and is still delivered.

// A point-to-point Recv from a rank that left fails the same way, at once (see recvMsg):
// no message can come after its leave notice, and those it sent before are already queued
// (the transports deliver a peer's messages in order), so they are still received.

// tagLeave is the message tag of the leave notice (negative tags belong to the package).
const tagLeave int64 = -1

// sendLeave sends the leave notice to every peer. Errors are ignored: a transport that
// cannot send has aborted, and its peers have been told why (or saw this rank die).
func (g *group) sendLeave(ctx context.Context) {
	g.opMu.Lock()
	last := g.completed
	g.opMu.Unlock()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], last)
	for p := range g.size {
		if p != g.rank {
			_ = g.t.SendMsg(ctx, p, tagLeave, b[:])
		}
	}
}

// watchLeaves waits for every peer's leave notice until ctx ends (Close).
func (g *group) watchLeaves(ctx context.Context) {
	g.eachPeer(func(p int) {
		var b [8]byte
		if g.t.RecvMsg(ctx, p, tagLeave, b[:]) == nil {
			g.peerLeft(p, binary.LittleEndian.Uint64(b[:]))
		}
	})
}

// eachPeer runs fn(peer) on a goroutine of its own for every other rank, counted in
// g.watchers (Close waits for them).
func (g *group) eachPeer(fn func(peer int)) {
	for p := range g.size {
		if p == g.rank {
			continue
		}
		g.watchers.Add(1)
		go func() {
			defer g.watchers.Done()
			fn(p)
		}()
	}
}

// peerLeft records that peer left after collective last, and fails the collective in
// progress when it is a later one.
func (g *group) peerLeft(peer int, last uint64) {
	g.opMu.Lock()
	g.left[peer] = int64(last)
	running := g.running
	g.opMu.Unlock()
	close(g.gone[peer])
	if running > last {
		g.fail(leftError(peer, last, running), true)
	}
}

// leftPeer returns the error of collective seq when a peer left before it, else nil.
// g.left[p] is -1 while p has not left. The caller holds opMu.
func (g *group) leftPeer(seq uint64) error {
	for p, last := range g.left {
		if last >= 0 && uint64(last) < seq {
			return leftError(p, uint64(last), seq)
		}
	}
	return nil
}

func leftError(peer int, last, seq uint64) error {
	return &PeerGoneError{Rank: peer, Cause: fmt.Errorf("it closed the group after collective seq %d, so collective seq %d cannot complete", last, seq)}
}

// recvMsg receives the message from peer with tag into b, and fails with a PeerGoneError
// naming peer once peer's leave notice has arrived and no message is queued. cancel cancels
// ctx's parent with a cause.
func (g *group) recvMsg(ctx context.Context, cancel context.CancelCauseFunc, peer int, tag int64, b []byte) error {
	goneErr := &PeerGoneError{Rank: peer, Cause: errors.New("it closed the group, so no further message can arrive")}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-g.gone[peer]:
			cancel(goneErr)
		case <-stop:
		}
	}()
	err := g.t.RecvMsg(ctx, peer, tag, b)
	if err != nil && context.Cause(ctx) == goneErr {
		// A message that was queued when the notice came is still taken (mailbox.take).
		if err = g.t.RecvMsg(ctx, peer, tag, b); err != nil {
			err = goneErr
		}
	}
	return err
}
