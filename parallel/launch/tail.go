package launch

import (
	"strings"
	"sync"
)

const (
	// stderrTailLines is how many of a worker's last stderr lines a WorkerError keeps.
	stderrTailLines = 8
	// stderrTailBytes cuts each kept line.
	stderrTailBytes = 512
)

// tail keeps the last stderrTailLines lines written to it.
type tail struct {
	mu  sync.Mutex
	buf []string
}

// add records one line (its end of line, if any, dropped; empty lines skipped).
func (t *tail) add(line []byte) {
	s := strings.TrimRight(string(line[:min(len(line), stderrTailBytes)]), "\r\n")
	if strings.TrimSpace(s) == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == stderrTailLines {
		t.buf = append(t.buf[:0], t.buf[1:]...)
	}
	t.buf = append(t.buf, s)
}

// lines returns a copy of the kept lines, oldest first.
func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.buf...)
}
