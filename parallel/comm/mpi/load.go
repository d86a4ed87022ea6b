package mpi

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// LibraryEnv names a full path to libmpi.so that overrides the search (MPI_LIBRARY).
const LibraryEnv = "MPI_LIBRARY"

// ErrNoCgo is returned by Load in a build without cgo (CGO_ENABLED=0).
var ErrNoCgo = errors.New("mpi: built without cgo (CGO_ENABLED=0): libmpi cannot be loaded; rebuild with CGO_ENABLED=1")

// The predefined handles gp_open resolves, in its order.
const (
	hCommWorld = iota
	hFloat
	hDouble
	hInt64
	hByte
	hUint16
	hSum
	hMax
	hMin
	hErrorsReturn
	nHandles
)

// mpiInPlace is OpenMPI's MPI_IN_PLACE ((void *) 1).
const mpiInPlace = 1

var (
	handles  [nHandles]uintptr
	loadOnce sync.Once
	loadErr  error
	libPath  string
)

// candidates lists the libraries Load tries, best first: $MPI_LIBRARY, then OpenMPI's
// sonames as the dynamic linker finds them (LD_LIBRARY_PATH, ld.so.cache), then Debian's
// and the usual prefixes' files.
func candidates() []string {
	var out []string
	if p := os.Getenv(LibraryEnv); p != "" {
		out = append(out, p)
	}
	out = append(out, "libmpi.so.40", "libmpi.so")
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libmpi.so.40", "/usr/lib/aarch64-linux-gnu/libmpi.so.40",
		"/usr/lib64/openmpi/lib/libmpi.so.40", "/usr/local/lib/libmpi.so.40", "/opt/openmpi/lib/libmpi.so.40"} {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Load opens OpenMPI's libmpi (see LibraryEnv), once, and resolves the functions and
// predefined handles the package calls. It fails in a build without cgo (ErrNoCgo), where no
// candidate loads (the error lists each one's reason), and for an MPI that is not OpenMPI
// (MPICH's handles are integers, which this binding does not declare).
func Load() error {
	loadOnce.Do(func() {
		if !cgoAvailable {
			loadErr = ErrNoCgo
			return
		}
		var reasons []string
		for _, p := range candidates() {
			err := openLib(p)
			if err == nil {
				libPath = p
				return
			}
			reasons = append(reasons, err.Error())
		}
		loadErr = fmt.Errorf("mpi: no OpenMPI library loads (apt-get install libopenmpi3, or set %s to libmpi.so's path):\n  %s",
			LibraryEnv, strings.Join(reasons, "\n  "))
	})
	return loadErr
}

// LibraryPath is the library Load opened, or "".
func LibraryPath() string {
	if Load() != nil {
		return ""
	}
	return libPath
}
