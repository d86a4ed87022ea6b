// Package guard runs calls into third-party decoders (npyio, image decoders) and turns a
// panic in one into an error, so that bad input ends as an error naming the file, never as a
// crashed rank.
package guard

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"
)

// ErrPanic is wrapped by the error Call returns when fn panicked.
var ErrPanic = errors.New("decoder panicked")

// Call runs fn and returns its error; a panic in fn becomes an error wrapping ErrPanic that
// carries the panic value and the function and line that panicked. Callers wrap it with the
// file and member being decoded and their own bad-input sentinel. Call is for decoders of
// outside data only: a panic from the project's own code is a bug to fix, not to hide.
func Call(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v (at %s)", ErrPanic, v, panicFrame(debug.Stack()))
		}
	}()
	return fn()
}

// panicFrame picks the function and line that panicked out of a stack trace: the first
// frame after the runtime's panic machinery.
func panicFrame(stack []byte) string {
	lines := bytes.Split(stack, []byte("\n"))
	for i := 0; i+1 < len(lines); i++ {
		if !bytes.HasPrefix(lines[i], []byte("panic(")) {
			continue
		}
		for j := i + 2; j+1 < len(lines); j += 2 {
			if !bytes.HasPrefix(lines[j], []byte("runtime.")) {
				return string(bytes.TrimSpace(lines[j])) + " " + string(bytes.TrimSpace(lines[j+1]))
			}
		}
	}
	return "an unknown frame"
}
