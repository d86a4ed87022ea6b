package mpi

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// The collectives that run the package's algorithms past a threshold (WithRingBytes).
const (
	kindAllReduce = iota
	kindReduceScatter
	kindAllGather
	kindBroadcast
	numKinds
)

var kindNames = [numKinds]string{"all-reduce", "reduce-scatter", "all-gather", "broadcast"}

// header is what a rank says of the collective it runs over MPI messages (agree).
type header struct {
	kind  int
	dtype comm.DType
	total int // elements of the whole buffer (all-gather's dst, reduce-scatter's src)
	root  int // broadcast only
	op    comm.Op
}

func (h header) words() [5]int64 {
	return [5]int64{int64(h.kind), int64(h.dtype), int64(h.total), int64(h.root), int64(h.op)}
}

func (h header) String() string {
	k := "unknown collective"
	if h.kind >= 0 && h.kind < numKinds {
		k = kindNames[h.kind]
	}
	s := fmt.Sprintf("%s of %d %v", k, h.total, h.dtype)
	switch h.kind {
	case kindBroadcast:
		s += fmt.Sprintf(" from rank %d", h.root)
	case kindAllReduce, kindReduceScatter:
		s += fmt.Sprintf(" (%v)", h.op)
	}
	return s
}

// mismatchError is agree's verdict: the ranks' headers differ. Every rank reaches it from
// the same headers before any data moved, so it fails the collective but not the group.
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string { return e.msg }
func (e *mismatchError) Unwrap() error { return comm.ErrMismatch }

// agree sends h to every other rank and receives theirs, on g.ringComm with the
// collective's tag, before the collective's own messages (which MPI keeps behind them: a
// rank's messages on one tag are received in the order it sent them). It returns a
// *mismatchError naming every rank's call when they differ.
func (g *Group) agree(tag int, h header) error {
	n := g.size
	all := make([][5]int64, n)
	all[g.rank] = h.words()
	var recvs, sends []*op
	for q := range n {
		if q == g.rank {
			continue
		}
		for _, recv := range []bool{true, false} {
			buf := unsafe.Pointer(&all[q][0])
			if !recv {
				buf = unsafe.Pointer(&all[g.rank][0])
			}
			kind, recvBytes := "header send", -1
			if recv {
				kind, recvBytes = "header recv", 40
			}
			o := g.newOp(kind, 40, recvBytes)
			o.peer, o.tag = q, tag
			o.pinp(buf)
			o.post = func() (uintptr, error) {
				var req uintptr
				if recv {
					return req, codeErr("MPI_Irecv", mpiIrecv(uintptr(buf), 5, handles[hInt64], q, tag, g.ringComm, &req))
				}
				return req, codeErr("MPI_Isend", mpiIsend(uintptr(buf), 5, handles[hInt64], q, tag, g.ringComm, &req))
			}
			if recv {
				recvs = append(recvs, o)
			} else {
				sends = append(sends, o)
			}
		}
	}
	g.postAll(append(recvs, sends...))
	var errs []error
	for _, o := range append(recvs, sends...) {
		<-o.done
		errs = append(errs, o.err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("exchanging the collective's header: %w", err)
	}
	same := true
	for q := range n {
		same = same && all[q] == all[0]
	}
	if same {
		return nil
	}
	var calls []string
	for q, w := range all {
		calls = append(calls, fmt.Sprintf("rank %d runs %v", q,
			header{kind: int(w[0]), dtype: comm.DType(w[1]), total: int(w[2]), root: int(w[3]), op: comm.Op(w[4])}))
	}
	return &mismatchError{fmt.Sprintf("%v: ranks disagree on the collective: %s", comm.ErrMismatch, strings.Join(calls, ", "))}
}
