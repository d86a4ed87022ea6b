//go:build !cgo

package dl

// Available reports whether this build can load libraries (it was built with cgo).
const Available = false

// Open fails: a build without cgo cannot dlopen.
func Open(candidates []string) (*Lib, error) { return nil, ErrNoCgo }

// Sym fails: a build without cgo cannot dlsym.
func (l *Lib) Sym(name string) (Func, error) { return nil, ErrNoCgo }

// Call returns -1: a build without cgo cannot call C.
func Call(f Func, args ...uintptr) int { return -1 }

// CallString returns "": a build without cgo cannot call C.
func CallString(f Func, code int) string { return "" }

// CallID returns -1: a build without cgo cannot call C.
func CallID(f Func, a0 uintptr, a1 int, id *[128]byte, a3 int) int { return -1 }
