package trainer

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress draws rank 0's per-epoch progress bar (step, images/s, loss, lr, ETA) with
// schollz/progressbar. Under gprun each redraw becomes one rank-prefixed line segment.
type progress struct {
	out io.Writer
	off bool
	bar *progressbar.ProgressBar
}

func newProgress(out io.Writer, off bool) *progress { return &progress{out: out, off: off} }

func (p *progress) start(epoch, epochs, steps, done int) {
	if p.off {
		return
	}
	p.bar = progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(p.out),
		progressbar.OptionSetDescription(fmt.Sprintf("epoch %d/%d", epoch+1, epochs)),
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

func (p *progress) update(done int, loss, lr, ips float64) {
	if p.off || p.bar == nil {
		return
	}
	p.bar.Describe(fmt.Sprintf("loss %.4f lr %.3g %5.0f img/s", loss, lr, ips))
	_ = p.bar.Set(done)
}

func (p *progress) finish() {
	if p.off || p.bar == nil {
		return
	}
	_ = p.bar.Finish()
	fmt.Fprintln(p.out)
	p.bar = nil
}
