package launch

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Streams selects standard streams of a worker, as torchrun's --redirects and --tee do.
type Streams uint8

const (
	NoStreams Streams = 0 // neither
	Stdout    Streams = 1 // standard output
	Stderr    Streams = 2 // standard error
	Both      Streams = 3 // both
)

// StreamsByRank is a Streams per local rank: All for every rank, or one per rank in Ranks
// (the others NoStreams).
type StreamsByRank struct {
	All   Streams
	Ranks map[int]Streams
}

// For returns the streams of local rank lr.
func (s StreamsByRank) For(lr int) Streams {
	if s.Ranks != nil {
		return s.Ranks[lr]
	}
	return s.All
}

func (s StreamsByRank) any() bool {
	for _, v := range s.Ranks {
		if v != NoStreams {
			return true
		}
	}
	return s.All != NoStreams
}

// ParseStreams reads torchrun's syntax: "3" for every local rank, or "0:1,1:2" for some
// (local rank 0 its stdout, 1 its stderr); 0 none, 1 stdout, 2 stderr, 3 both.
func ParseStreams(spec string) (StreamsByRank, error) {
	spec = strings.TrimSpace(spec)
	bad := func() (StreamsByRank, error) {
		return StreamsByRank{}, fmt.Errorf("streams %q: want 0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:N,... such as 0:3,1:2", spec)
	}
	one := func(s string) (Streams, bool) {
		n, err := strconv.Atoi(s)
		return Streams(n), err == nil && n >= 0 && n <= 3
	}
	if spec == "" {
		return StreamsByRank{}, nil
	}
	if !strings.Contains(spec, ":") {
		v, ok := one(spec)
		if !ok {
			return bad()
		}
		return StreamsByRank{All: v}, nil
	}
	out := StreamsByRank{Ranks: map[int]Streams{}}
	for item := range strings.SplitSeq(spec, ",") {
		r, v, _ := strings.Cut(item, ":")
		lr, err := strconv.Atoi(strings.TrimSpace(r))
		s, ok := one(strings.TrimSpace(v))
		if err != nil || lr < 0 || !ok {
			return bad()
		}
		out.Ranks[lr] = s
	}
	return out, nil
}

// workerLogs opens the log files of local rank lr in attempt restart, as torchrun lays them
// out: LogDir/RunID/attempt_N/LOCAL_RANK/{stdout,stderr}.log, for the streams redirected or
// teed. It returns where each stream goes on the console (nil when redirected) and in a
// file (nil when not logged), and a function closing the files.
func (c *Config) workerLogs(lr, restart int) (conOut, conErr, fileOut, fileErr io.Writer, closeAll func(), err error) {
	conOut, conErr = c.Stdout, c.Stderr
	closeAll = func() {}
	red, tee := c.Redirects.For(lr), c.Tee.For(lr)
	if red|tee == NoStreams {
		return conOut, conErr, nil, nil, closeAll, nil
	}
	dir := filepath.Join(c.LogDir, c.RunID, "attempt_"+strconv.Itoa(restart), strconv.Itoa(lr))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, nil, nil, closeAll, fmt.Errorf("launch: log directory: %w", err)
	}
	var files []*os.File
	closeAll = func() {
		for _, f := range files {
			f.Close()
		}
	}
	open := func(which Streams, name string) (io.Writer, error) {
		if (red|tee)&which == 0 {
			return nil, nil
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("launch: log file: %w", err)
		}
		files = append(files, f)
		return f, nil
	}
	if fileOut, err = open(Stdout, "stdout.log"); err == nil {
		fileErr, err = open(Stderr, "stderr.log")
	}
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, func() {}, err
	}
	if red&Stdout != 0 {
		conOut = nil
	}
	if red&Stderr != 0 {
		conErr = nil
	}
	return conOut, conErr, fileOut, fileErr, closeAll, nil
}
