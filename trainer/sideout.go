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
	// drawing, while plotAsync's drawing runs, receives its error (nil: written).
	drawing chan error
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

// plot draws curves.png from the log, waiting for a drawing that plotAsync started; it
// returns the path written, or "" when none was (a plot that cannot be drawn is skipped with
// one warning).
func (s *sideOutputs) plot() string {
	if s.m == nil {
		return ""
	}
	s.waitPlot()
	if err := s.m.Plot(s.plotTo); err != nil {
		s.warn("plot", s.plotTo, err)
		return ""
	}
	return s.plotTo
}

// plotAsync reads the log's curves now and draws and writes curves.png in the background,
// so that rank 0 does not hold the other ranks at the next step while it renders and syncs
// the file; the plot has the records logged before the call, as plot's would. It first
// waits for the drawing it started before. It returns the path it is writing, or "" (no
// log, or the log could not be read: warned as plot's).
func (s *sideOutputs) plotAsync() string {
	if s.m == nil {
		return ""
	}
	s.waitPlot()
	panels, err := s.m.panels()
	if err != nil {
		s.warn("plot", s.plotTo, err)
		return ""
	}
	done := make(chan error, 1)
	s.drawing = done
	go func() { done <- drawPanels(panels, s.plotTo) }()
	return s.plotTo
}

// waitPlot waits for the drawing plotAsync started, if any, warning as plot does when it
// failed, and reports whether the last plot started was written.
func (s *sideOutputs) waitPlot() bool {
	if s.drawing == nil {
		return true
	}
	err := <-s.drawing
	s.drawing = nil
	if err != nil {
		s.warn("plot", s.plotTo, err)
		return false
	}
	return true
}
