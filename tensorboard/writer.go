// Package tensorboard writes TensorBoard event files (events.out.tfevents.*): scalar summaries
// as Event protocol buffers in TFRecord framing, without TensorFlow or a protobuf library.
package tensorboard

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// ErrClosed is returned by a Writer's methods after Close.
var ErrClosed = errors.New("tensorboard: writer closed")

// FileVersion is the file_version of the first event of every file, as TensorFlow writes it.
const FileVersion = "brain.Event:2"

// Writer appends scalar events to one event file, as torch.utils.tensorboard.SummaryWriter's
// add_scalar does. Its methods are safe for concurrent use.
//
// Events are buffered and written whole: the file is flushed every flush interval (by a
// background goroutine, so a stalled training loop still shows its last points), on Flush and
// on Close; a reader of the live file (TensorBoard) sees only complete records, apart from a
// crash in the middle of a write, which leaves a truncated last record that TensorBoard and
// ReadFile ignore. The file keeps its final name from the start rather than being renamed on
// Close, because TensorBoard reads event files while they grow.
//
// Close must be called once training ends; it flushes, syncs and closes the file. Any method
// after Close returns ErrClosed. A write error is kept and returned by every later call.
type Writer struct {
	path string

	mu     sync.Mutex
	f      *os.File
	buf    *bufio.Writer
	err    error // the first write error, returned by every later call
	closed bool
	rec    []byte // scratch for one encoded event
	now    func() time.Time
	stop   chan struct{} // nil without a background flusher
	done   chan struct{}

	stopOnce sync.Once
}

// Option configures NewWriter.
type Option func(*options)

type options struct {
	flush time.Duration
	now   func() time.Time
	host  string
}

// WithFlushInterval sets how often buffered events reach the file (default 5 s; PyTorch's
// SummaryWriter uses 120 s). 0 flushes after every event.
func WithFlushInterval(d time.Duration) Option { return func(o *options) { o.flush = d } }

// WithClock sets where wall times and the file name's time come from (default time.Now);
// tests use it for reproducible files.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithHostname replaces os.Hostname in the file name.
func WithHostname(h string) Option { return func(o *options) { o.host = h } }

// NewWriter creates dir (and its parents) and in it the event file
// events.out.tfevents.<unix seconds>.<hostname>, with ".1", ".2"… appended when that name is
// taken, and writes the file_version event. Point TensorBoard at dir (or a parent of several
// runs' dirs): tensorboard --logdir dir.
func NewWriter(dir string, opts ...Option) (*Writer, error) {
	o := options{flush: 5 * time.Second, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if o.host == "" {
		o.host, _ = os.Hostname()
		if o.host == "" {
			o.host = "localhost"
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	t := o.now()
	base := filepath.Join(dir, "events.out.tfevents."+strconv.FormatInt(t.Unix(), 10)+"."+o.host)
	var f *os.File
	var err error
	for k := 0; k < 100; k++ {
		path := base
		if k > 0 {
			path += "." + strconv.Itoa(k)
		}
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	w := &Writer{path: f.Name(), f: f, buf: bufio.NewWriterSize(f, 64<<10), now: o.now}
	w.rec = appendFileVersion(w.rec[:0], wallTime(t), FileVersion)
	if err := w.write(o.flush == 0); err != nil {
		f.Close()
		return nil, err
	}
	if o.flush > 0 {
		w.stop, w.done = make(chan struct{}), make(chan struct{})
		go w.flusher(o.flush)
	}
	return w, nil
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// Scalar appends the value of tag at step (TensorBoard's x axis), stamped with the current wall
// time. The value is stored as float32, as TensorBoard's simple_value is. Tags group into
// sections by their prefix up to "/" (e.g. "train/loss", "val/top1").
func (w *Writer) Scalar(tag string, step int64, value float64) error {
	if tag == "" {
		return fmt.Errorf("tensorboard: %s: scalar at step %d with an empty tag", w.path, step)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	w.rec = appendScalar(w.rec[:0], wallTime(w.now()), step, tag, float32(value))
	return w.write(w.stop == nil)
}

// Flush writes the buffered events to the file.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	return w.flushLocked()
}

// Close flushes the buffered events, syncs the file to disk and closes it. A second Close
// returns ErrClosed.
func (w *Writer) Close() error {
	w.stopOnce.Do(func() {
		if w.stop != nil {
			close(w.stop)
			<-w.done
		}
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.closed = true
	err := w.err
	if err == nil {
		err = w.flushLocked()
	}
	if err == nil {
		if err = w.f.Sync(); err != nil {
			err = fmt.Errorf("tensorboard: %w", err)
		}
	}
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("tensorboard: %w", cerr)
	}
	return err
}

func (w *Writer) usable() error {
	if w.closed {
		return ErrClosed
	}
	return w.err
}

// write frames w.rec as one record into the buffer, flushing when asked.
func (w *Writer) write(flush bool) error {
	var hdr [12]byte
	putHeader(hdr[:], len(w.rec))
	var trl [4]byte
	putCRC(trl[:], w.rec)
	for _, b := range [][]byte{hdr[:], w.rec, trl[:]} {
		if _, err := w.buf.Write(b); err != nil {
			w.err = fmt.Errorf("tensorboard: %w", err)
			return w.err
		}
	}
	if flush {
		return w.flushLocked()
	}
	return nil
}

func (w *Writer) flushLocked() error {
	if err := w.buf.Flush(); err != nil {
		w.err = fmt.Errorf("tensorboard: %w", err)
	}
	return w.err
}

func (w *Writer) flusher(every time.Duration) {
	defer close(w.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			if !w.closed && w.err == nil {
				w.flushLocked()
			}
			w.mu.Unlock()
		}
	}
}

// wallTime is t in seconds since the Unix epoch, as Event.wall_time holds it.
func wallTime(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}
