package comm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// Aborter is implemented by groups that can be aborted: Abort fails the group on this rank
// and on every peer with an *AbortError naming this rank and reason, then releases it as
// Close does, without waiting long for the peers. The package's groups implement it; use the
// function Abort, which also handles groups that do not.
type Aborter interface {
	Abort(ctx context.Context, reason error) error
}

// Abort ends g because this rank failed with reason (a bad input file, a full disk): every
// pending and later operation, here and on every peer, fails with an *AbortError that names
// this rank and reason (errors.Is(err, ErrAborted); on the peers errors.Is(err, ErrPeerGone)
// too, since this rank is leaving), so that the peers stop at once instead of waiting for
// this rank until their timeout. Then g is closed: Abort returns once every peer has
// acknowledged the notice (a round trip) or left, and at most abortLinger (1 s) later when
// one does not answer, or sooner when ctx ends. Call it
// instead of Close when a rank gives up; Close is for a rank that finished.
//
// Under a launcher that asks for it (launchenv.ErrorFileEnv), Abort also records the failure for the
// launcher's report. For a group that does not implement Aborter, Abort is Close bounded by
// the same linger.
func Abort(ctx context.Context, g Group, reason error) error {
	if reason == nil {
		reason = errors.New("no reason given")
	}
	launchenv.RecordFailure(launchenv.FailureRecord{Rank: g.Rank(), Time: time.Now(), Message: reason.Error(), CauseRank: causeRank(reason)})
	if a, ok := g.(Aborter); ok {
		return a.Abort(ctx, reason)
	}
	ctx, cancel := context.WithTimeout(ctx, abortLinger)
	defer cancel()
	return g.Close(ctx)
}

// abortLinger bounds how long an aborting rank waits for its peers to acknowledge its notice
// (or leave) before it closes its connections: the wait only keeps the connections open
// until the peers have read it, which takes a round trip.
const abortLinger = time.Second

// AbortError reports that Rank aborted the group (see Abort) because of Reason.
type AbortError struct {
	// Rank is the rank that aborted.
	Rank int
	// Reason is why. On the aborting rank it is the error passed to Abort (errors.Is and
	// errors.As see through it); on the peers it carries that error's message.
	Reason error
	// Remote is true on the peers: the abort came from another rank, which is leaving, so
	// errors.Is(err, ErrPeerGone) holds as well as errors.Is(err, ErrAborted).
	Remote bool
}

// Error names the rank and its reason: "comm: rank 1 aborted: <reason>".
func (e *AbortError) Error() string {
	return fmt.Sprintf("comm: rank %d aborted: %v", e.Rank, e.Reason)
}

// Is makes errors.Is(err, ErrAborted) true, and on the peers errors.Is(err, ErrPeerGone).
func (e *AbortError) Is(target error) bool {
	return target == ErrAborted || e.Remote && target == ErrPeerGone
}

// Unwrap returns the reason.
func (e *AbortError) Unwrap() error { return e.Reason }

// ownAbort returns the AbortError of this rank's own Abort that err wraps, or nil.
func ownAbort(err error) *AbortError {
	var ae *AbortError
	if errors.As(err, &ae) && !ae.Remote {
		return ae
	}
	return nil
}

// abortNotice encodes err for the peers (the payload of a remote abort): its code, then its
// message; for this rank's own Abort the message is the reason alone.
func abortNotice(err error) []byte {
	if ae := ownAbort(err); ae != nil {
		return append([]byte{codeAborted}, ae.Reason.Error()...)
	}
	return append([]byte{errCode(err)}, err.Error()...)
}

// peerAbortError is what this rank fails with when peer's abort notice (see abortNotice)
// arrives: an *AbortError for the peer's Abort, a *RemoteError for any other failure.
func peerAbortError(peer int, notice []byte) error {
	if len(notice) == 0 {
		return &RemoteError{Rank: peer, Msg: "aborted without a message"}
	}
	if notice[0] == codeAborted {
		return &AbortError{Rank: peer, Reason: errors.New(string(notice[1:])), Remote: true}
	}
	return &RemoteError{Rank: peer, Msg: string(notice[1:]), code: notice[0]}
}

// causeRank returns the peer whose failure err reports (an *AbortError from a peer, a
// *RemoteError or a *PeerGoneError), or -1: the launcher's report blames that peer's own
// failure rather than this one, which it caused.
func causeRank(err error) int {
	var ae *AbortError
	if errors.As(err, &ae) && ae.Remote {
		return ae.Rank
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Rank
	}
	var pg *PeerGoneError
	if errors.As(err, &pg) {
		return pg.Rank
	}
	return -1
}
