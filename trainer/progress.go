package trainer

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/launch"
	"github.com/schollz/progressbar/v3"
)

// progress shows rank 0's training progress in one of two forms. On a terminal, a
// per-epoch bar (schollz/progressbar) redrawn in place with "\r": epoch, step, loss, lr,
// images/s and ETA. Anywhere else (a file, a pipe), one line per -print-freq steps and
// nothing redrawn, so that a log holds whole lines, each of which a launcher can prefix.
// Under gprun, whose output is a terminal, the bar is drawn on that terminal (which gprun
// names in launch.ProgressTTYEnv), since gprun passes the workers' own output on line by line.
type progress struct {
	out    io.Writer // lines
	barOut io.Writer // the bar: out, or the launcher's terminal
	tty    *os.File  // the launcher's terminal, opened here; nil when none
	mode   string    // "off", "bar" or "log"
	bar    *progressbar.ProgressBar
	label  string // "epoch E/N"
	steps  int    // optimizer steps in the epoch
	shown  int    // steps of the epoch the bar or log has shown
	digits int
}

// newProgress shows progress on out as mode says ("bar", "log", or "" for a bar on a
// terminal, out's or the launcher's, and lines elsewhere); off shows nothing.
func newProgress(out io.Writer, mode string, off bool) *progress {
	p := &progress{out: out, barOut: out, mode: mode}
	switch {
	case off:
		p.mode = "off"
	case mode == "log":
	case isTerminal(out):
		p.mode = "bar"
	default:
		if p.tty = launcherTTY(); p.tty != nil {
			p.mode, p.barOut = "bar", p.tty
		} else if mode == "" {
			p.mode = "log"
		}
	}
	return p
}

// launcherTTY opens the terminal launch.ProgressTTYEnv names, or returns nil when it is unset or
// no terminal can be opened there.
func launcherTTY() *os.File {
	path := os.Getenv(launch.ProgressTTYEnv)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	if !isTerminal(f) {
		f.Close()
		return nil
	}
	return f
}

// close releases the launcher's terminal.
func (p *progress) close() {
	if p.tty != nil {
		p.tty.Close()
		p.tty = nil
	}
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
		progressbar.OptionSetWriter(p.barOut),
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
	fmt.Fprintln(p.barOut)
	p.bar = nil
}
