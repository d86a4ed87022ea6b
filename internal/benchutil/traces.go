package benchutil

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Sample is one stack of a CPU profile and the CPU time charged to it.
type Sample struct {
	// Seconds is the CPU time of the stack's samples.
	Seconds float64
	// Frames are the stack's functions, leaf first, without pprof's "(inline)" marks.
	Frames []string
}

// Has reports whether any frame's name contains substr.
func (s Sample) Has(substr string) bool {
	for _, f := range s.Frames {
		if strings.Contains(f, substr) {
			return true
		}
	}
	return false
}

// ProfileSamples reads the CPU profile at prof, written by the program exe, through
// `go tool pprof -traces` (so the Go toolchain must be on PATH, as for `go run`).
func ProfileSamples(exe, prof string) ([]Sample, error) {
	out, err := exec.Command("go", "tool", "pprof", "-traces", exe, prof).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof -traces %s: %w", prof, err)
	}
	return ReadTraces(string(out))
}

// ReadTraces parses the output of `go tool pprof -traces`: blocks of a stack's time on its
// first line with the leaf frame, then one frame a line. It fails for a profile without
// samples.
func ReadTraces(traces string) ([]Sample, error) {
	var out []Sample
	var cur Sample
	flush := func() {
		if cur.Seconds > 0 && len(cur.Frames) > 0 {
			out = append(out, cur)
		}
		cur = Sample{}
	}
	sc := bufio.NewScanner(strings.NewReader(traces))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----") {
			flush()
			continue
		}
		head, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		if head == "" {
			continue
		}
		if d, err := time.ParseDuration(head); err == nil {
			flush()
			cur.Seconds = d.Seconds()
			if fn := frameName(rest); fn != "" {
				cur.Frames = append(cur.Frames, fn)
			}
			continue
		}
		if cur.Seconds > 0 {
			cur.Frames = append(cur.Frames, frameName(line))
		}
	}
	flush()
	if len(out) == 0 {
		return nil, fmt.Errorf("the profile has no samples")
	}
	return out, nil
}

// frameName is a trace line's function, without pprof's marks.
func frameName(s string) string {
	return strings.TrimSuffix(strings.TrimSpace(s), " (inline)")
}
