// Package dl opens shared libraries at run time (dlopen/dlsym) and calls their C functions,
// so that the CUDA packages build with no CUDA headers or libraries and a binary that uses
// them starts anywhere, reporting a clear error when a GPU library is missing.
//
// Only this package uses cgo. Built with CGO_ENABLED=0, Open returns ErrNoCgo and every
// package above it reports "built without cgo".
package dl

import (
	"errors"
	"fmt"
	"unsafe"
)

// ErrNoCgo is returned by Open in a build without cgo.
var ErrNoCgo = errors.New("built without cgo (CGO_ENABLED=0): GPU libraries cannot be loaded; rebuild with CGO_ENABLED=1")

// Lib is an opened shared library.
type Lib struct {
	// Path is the candidate that loaded (a full path or a bare soname).
	Path   string
	handle unsafe.Pointer
}

// Func is the address of a C function in a loaded library.
type Func unsafe.Pointer

// Table resolves names into the given slots, in order, and reports the first missing symbol.
func (l *Lib) Table(names []string, slots []*Func) error {
	if len(names) != len(slots) {
		return fmt.Errorf("dl: %d names for %d slots", len(names), len(slots))
	}
	for i, n := range names {
		f, err := l.Sym(n)
		if err != nil {
			return err
		}
		*slots[i] = f
	}
	return nil
}

// New allocates a zero T on the Go heap, which the garbage collector never moves, for an
// out-parameter or argument block passed to C through Call as a uintptr. (new(T) may live
// on the goroutine stack, which moves when it grows, so its address could go stale between
// the conversion to uintptr and the C call.) Keep it alive with runtime.KeepAlive until the
// call returns.
func New[T any]() *T {
	p := new(T)
	if never {
		escape = p
	}
	return p
}

var (
	never  bool
	escape any
)
