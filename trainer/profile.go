package trainer

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
)

// WithCPUProfile writes a CPU profile of each rank's Fit or Validate (opening the data,
// building the model, training, evaluating and the outputs) to path.rankN, N the rank, in
// the format go tool pprof reads ("" off, the default). The Go runtime profiles a whole
// process, so ranks that share one process (WithGroup over goroutine groups) cannot each
// write one: the second to start fails saying so.
func WithCPUProfile(path string) Option {
	return func(s *settings) error { s.CPUProfile = path; return nil }
}

// startCPUProfile starts rank's CPU profile into s.CPUProfile's file for that rank and
// returns what stops it and closes the file; with no profile asked for it returns a no-op.
func (s *settings) startCPUProfile(rank int) (stop func() error, err error) {
	if s.CPUProfile == "" {
		return func() error { return nil }, nil
	}
	path := s.CPUProfile + ".rank" + strconv.Itoa(rank)
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trainer: rank %d: CPU profile (WithCPUProfile, -cpuprofile): %w", rank, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("trainer: rank %d: CPU profile %s (WithCPUProfile, -cpuprofile): %w; "+
			"one process profiles one rank: run ranks as processes (gprun) or profile without WithCPUProfile", rank, path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("trainer: rank %d: CPU profile %s: %w", rank, path, err)
		}
		return nil
	}, nil
}
