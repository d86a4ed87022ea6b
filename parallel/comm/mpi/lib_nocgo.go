//go:build !cgo

package mpi

// cgoAvailable reports whether this build can load libmpi.
const cgoAvailable = false

// status is a completed request's MPI_Status; a build without cgo has none.
type status struct{}

func (s *status) sourceTag() (int, int)   { return 0, 0 }
func (s *status) errCode() int            { return -1 }
func (s *status) wasCancelled() bool      { return false }
func (s *status) receivedBytes() int      { return 0 }
func statusAt(st []status, i int) *status { return &st[i] }

func openLib(string) error { return ErrNoCgo }

func mpiInit(int) (provided, code int)                                         { return 0, -1 }
func mpiFinalize() int                                                         { return -1 }
func mpiAbort(uintptr, int) int                                                { return -1 }
func mpiYield()                                                                {}
func mpiCommFree(uintptr) int                                                  { return -1 }
func mpiSetErrhandler(uintptr) int                                             { return -1 }
func mpiCancel(uintptr) int                                                    { return -1 }
func mpiIbarrier(uintptr, *uintptr) int                                        { return -1 }
func mpiRankSize(uintptr) (rank, size, code int)                               { return 0, 0, -1 }
func mpiTagUB(uintptr) int                                                     { return 0 }
func mpiIdup(uintptr, *uintptr, *uintptr) int                                  { return -1 }
func mpiIallreduce(_, _ uintptr, _ int, _, _, _ uintptr, _ *uintptr) int       { return -1 }
func mpiIbcast(uintptr, int, uintptr, int, uintptr, *uintptr) int              { return -1 }
func mpiIallgather(uintptr, int, uintptr, int, uintptr, uintptr, *uintptr) int { return -1 }
func mpiIallgatherv(uintptr, int, uintptr, uintptr, uintptr, uintptr, uintptr, *uintptr) int {
	return -1
}
func mpiIreduceScatter(_, _, _, _, _, _ uintptr, _ *uintptr) int      { return -1 }
func mpiIsend(uintptr, int, uintptr, int, int, uintptr, *uintptr) int { return -1 }
func mpiIrecv(uintptr, int, uintptr, int, int, uintptr, *uintptr) int { return -1 }
func mpiTestsome([]uintptr, []int32, []status) (n, code int)          { return 0, -1 }
func mpiErrorString(int) string                                       { return "" }
func mpiVersion() string                                              { return "" }
