package launch

import (
	"context"
	"fmt"
	"time"
)

// Note [Restart backoff]: a fault that lasts a second or two (a full disk being freed, a
// file server restarting) would use up MaxRestarts in restarts that each fail at once.
// Restarts are therefore spaced: Config.RestartBackoff before the first, doubling after
// each attempt that failed quickly up to maxRestartBackoff, and back to RestartBackoff after
// an attempt that ran at least backoffResetAfter (the job was healthy; the fault is new).
// torchrun has no backoff: its agent checks the workers every --monitor-interval (0.1 s by
// default in torchrun 2.x, 5 s in older versions), which is all that spaces its restarts.

// maxRestartBackoff caps the wait between restarts.
const maxRestartBackoff = 30 * time.Second

// backoffResetAfter is how long an attempt must have run for the next wait to start again
// from Config.RestartBackoff.
const backoffResetAfter = time.Minute

// backoff computes the waits between restarts (see Note [Restart backoff]).
type backoff struct {
	first, cur time.Duration
}

// next returns the wait before the restart that follows an attempt that ran for ran.
func (b *backoff) next(ran time.Duration) time.Duration {
	switch {
	case b.first <= 0:
		return 0
	case b.cur == 0 || ran >= backoffResetAfter:
		b.cur = b.first
	default:
		b.cur = min(2*b.cur, max(maxRestartBackoff, b.first))
	}
	return b.cur
}

// restartIn says when a restart comes, for the line that announces it.
func restartIn(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(" in %v (--restart-backoff)", d)
}

// sleep waits d before a restart; a forwarded signal or the end of ctx cuts it short and
// ends the job, as it would while the workers run.
func (c *Config) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case sig := <-c.Signals:
		return fmt.Errorf("%w %v", ErrInterrupted, sig)
	case <-ctx.Done():
		return fmt.Errorf("launch: %w", ctx.Err())
	}
}
