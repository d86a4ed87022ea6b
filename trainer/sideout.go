package trainer

import (
	"log/slog"
	"path/filepath"
)

// sideOutputs are rank 0's metrics log, TensorBoard file and plot: outputs beside the
// training, never a reason to end it. A write that fails is reported once per output, as a
// warning naming the file and the error, and training goes on; the output's later failures
// are not repeated. On other ranks (m nil) every method does nothing.
type sideOutputs struct {
	m      *Metrics
	plotTo string // curves.png in the run directory
	log    *slog.Logger
	warned map[string]bool
}

// warn reports err of output what, once per what.
func (s *sideOutputs) warn(what, path string, err error) {
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	if s.warned[what] {
		return
	}
	s.warned[what] = true
	s.log.Warn(what+" failed; training goes on without it", "path", path, "err", err)
}

// add logs r to metrics.jsonl and TensorBoard.
func (s *sideOutputs) add(r Record) {
	if s.m == nil {
		return
	}
	if err := s.m.Add(r); err != nil {
		s.warn("metrics log", s.m.path, err)
	}
}

// scalar writes one TensorBoard scalar.
func (s *sideOutputs) scalar(tag string, step int64, v float64) {
	if s.m == nil {
		return
	}
	if err := s.m.Scalar(tag, step, v); err != nil {
		s.warn("tensorboard "+tag, filepath.Dir(s.m.path), err)
	}
}

// plot draws curves.png from the log; it returns the path written, or "" when none was
// (a plot that cannot be drawn is skipped with one warning).
func (s *sideOutputs) plot() string {
	if s.m == nil {
		return ""
	}
	if err := s.m.Plot(s.plotTo); err != nil {
		s.warn("plot", s.plotTo, err)
		return ""
	}
	return s.plotTo
}
