package trainer

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows rank 0's training progress in one of two forms. On a terminal, a
// per-epoch bar (schollz/progressbar) redrawn in place with "\r": epoch, step, loss, lr,
// images/s and ETA. Anywhere else (a file, a pipe, gprun), one line per -print-freq steps and
// nothing redrawn, so that a log holds whole lines, each of which a launcher can prefix.
type progress struct {
	out    io.Writer
	mode   string // "off", "bar" or "log"
	bar    *progressbar.ProgressBar
	label  string // "epoch E/N"
	steps  int    // optimizer steps in the epoch
	shown  int    // steps of the epoch the bar or log has shown
	digits int
}

// newProgress shows progress on out as mode says ("bar", "log", or "" for bar on a terminal
// and log elsewhere); off shows nothing.
func newProgress(out io.Writer, mode string, off bool) *progress {
	switch {
	case off:
		mode = "off"
	case mode == "":
		mode = "log"
		if isTerminal(out) {
			mode = "bar"
		}
	}
	return &progress{out: out, mode: mode}
}

// isTerminal reports whether w is a character device (a terminal), not a file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// start begins epoch (0-based) of epochs, of steps optimizer steps, done of which a resumed
// run has already taken.
func (p *progress) start(epoch, epochs, steps, done int) {
	p.label, p.steps, p.shown = fmt.Sprintf("epoch %d/%d", epoch+1, epochs), steps, done
	p.digits = len(fmt.Sprint(steps))
	if p.mode != "bar" {
		return
	}
	p.bar = progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(p.out),
		progressbar.OptionSetDescription(p.label),
		progressbar.OptionSetWidth(24),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetRenderBlankState(false),
	)
	if done > 0 {
		_ = p.bar.Set(done)
	}
}

// update shows that done steps of the epoch are over (step in the whole run), with the
// global mean loss of the epoch so far.
func (p *progress) update(done int, step int64, loss, lr, ips float64) {
	p.shown = done
	switch p.mode {
	case "bar":
		if p.bar == nil {
			return
		}
		p.bar.Describe(fmt.Sprintf("%s  loss %.4f  lr %.3g  %5.0f img/s", p.label, loss, lr, ips))
		_ = p.bar.Set(done)
	case "log":
		fmt.Fprintf(p.out, "%s  [%*d/%d]  step %d  loss %.4f  lr %.4g  %.0f img/s\n",
			p.label, p.digits, done, p.steps, step, loss, lr, ips)
	}
}

// finish ends the epoch's bar where it is: full after a whole epoch, short of it after a
// run stopped early (-max-steps), never drawn as complete when it was not.
func (p *progress) finish() {
	if p.mode != "bar" || p.bar == nil {
		return
	}
	if p.shown >= p.steps {
		_ = p.bar.Finish()
	} else {
		_ = p.bar.Exit()
	}
	fmt.Fprintln(p.out)
	p.bar = nil
}
