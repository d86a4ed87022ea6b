package comm

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on with errors.Is. The errors returned by the package wrap
// them with the rank, the operation and the peer involved.
var (
	// ErrPeerGone: a peer process exited or its connection broke; the message names its rank.
	ErrPeerGone = errors.New("comm: peer gone")
	// ErrTimeout: an operation did not complete within its timeout.
	ErrTimeout = errors.New("comm: timeout")
	// ErrMismatch: ranks disagree on a collective (operation, sequence number, dtype or size).
	ErrMismatch = errors.New("comm: mismatch across ranks")
	// ErrClosed: the group or store was closed.
	ErrClosed = errors.New("comm: closed")
	// ErrAborted: the operation was cancelled through its context, or a rank aborted the
	// group (Abort; the error is then an *AbortError naming the rank and its reason).
	ErrAborted = errors.New("comm: aborted")
	// ErrInvalid: the arguments of a call are invalid (for example a length that does not match).
	ErrInvalid = errors.New("comm: invalid argument")
)

// PeerGoneError reports that the process of Rank is gone.
type PeerGoneError struct {
	// Rank is the rank of the peer that is gone.
	Rank int
	// Cause is the underlying error (for example io.EOF or a reset connection).
	Cause error
}

// Error names the peer.
func (e *PeerGoneError) Error() string {
	if e.Cause == nil {
		return fmt.Sprintf("comm: peer rank %d gone", e.Rank)
	}
	return fmt.Sprintf("comm: peer rank %d gone: %v", e.Rank, e.Cause)
}

// Is makes errors.Is(err, ErrPeerGone) true.
func (e *PeerGoneError) Is(target error) bool { return target == ErrPeerGone }

// Unwrap returns the cause.
func (e *PeerGoneError) Unwrap() error { return e.Cause }

// Abort codes carried in remote-abort messages so a peer's error keeps its sentinel.
const (
	codeOther    = 0
	codeMismatch = 1
	codePeerGone = 2
	codeTimeout  = 3
	codeAborted  = 4 // Abort: the message is the aborting rank's reason alone
)

func errCode(err error) byte {
	if ownAbort(err) != nil {
		return codeAborted
	}
	switch {
	case errors.Is(err, ErrMismatch):
		return codeMismatch
	case errors.Is(err, ErrPeerGone):
		return codePeerGone
	case errors.Is(err, ErrTimeout):
		return codeTimeout
	}
	return codeOther
}

// RemoteError is an error another rank hit and broadcast to the group before aborting.
type RemoteError struct {
	// Rank is the rank that reported the error.
	Rank int
	// Msg is its error message.
	Msg  string
	code byte
}

// Error names the reporting rank.
func (e *RemoteError) Error() string { return fmt.Sprintf("rank %d reported: %s", e.Rank, e.Msg) }

// Is maps the remote error's kind to the sentinels.
func (e *RemoteError) Is(target error) bool {
	switch e.code {
	case codeMismatch:
		return target == ErrMismatch
	case codePeerGone:
		return target == ErrPeerGone
	case codeTimeout:
		return target == ErrTimeout
	}
	return target == ErrAborted
}
