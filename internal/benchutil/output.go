package benchutil

import (
	"bytes"
	"sync"
)

// Output collects a child process's output (an exec.Cmd's Stdout or Stderr) while the
// parent may read what has arrived so far. The zero value is ready to use; it is safe for
// concurrent use.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String is everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
