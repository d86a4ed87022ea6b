package comm

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// MonitoredBarrierTag is the point-to-point tag MonitoredBarrier uses; do not use it yourself.
const MonitoredBarrierTag = 1<<31 - 1

// MonitoredBarrier is a barrier that names the ranks that did not arrive within timeout:
// rank 0 collects an arrival message from every rank, then releases them (torch's
// monitored_barrier). On failure every rank that arrived returns an error listing the
// missing ranks. It is meant for debugging hangs; after it fails the group should be closed.
func MonitoredBarrier(ctx context.Context, g Group, timeout time.Duration) error {
	n, r := g.Size(), g.Rank()
	if n == 1 {
		return nil
	}
	// msg[0] is 0 for "released", 1 for "failed"; msg[1+i] is 1 when rank i is missing.
	msg := make(I64, 1+n)
	if r != 0 {
		if err := g.Send(I64{1}, 0, MonitoredBarrierTag).Wait(ctx); err != nil {
			return fmt.Errorf("rank %d: monitored barrier: %w", r, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*timeout)
		defer cancel()
		if err := g.Recv(msg, 0, MonitoredBarrierTag).Wait(wctx); err != nil {
			return fmt.Errorf("rank %d: monitored barrier: rank 0 did not release the barrier within %v: %w", r, 2*timeout, err)
		}
		if msg[0] != 0 {
			return fmt.Errorf("rank %d: monitored barrier: %w: ranks %v did not arrive within %v", r, ErrTimeout, missingRanks(msg), timeout)
		}
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	works := make([]Work, n)
	for p := 1; p < n; p++ {
		works[p] = g.Recv(make(I64, 1), p, MonitoredBarrierTag)
	}
	for p := 1; p < n; p++ {
		if works[p].Wait(wctx) != nil {
			msg[0], msg[1+p] = 1, 1
		}
	}
	for p := 1; p < n; p++ {
		if msg[1+p] == 0 {
			if err := g.Send(msg, p, MonitoredBarrierTag).Wait(ctx); err != nil {
				return fmt.Errorf("rank 0: monitored barrier: releasing rank %d: %w", p, err)
			}
		}
	}
	if msg[0] != 0 {
		return fmt.Errorf("rank 0: monitored barrier: %w: ranks %v did not arrive within %v", ErrTimeout, missingRanks(msg), timeout)
	}
	return nil
}

func missingRanks(msg I64) []int {
	var m []int
	for i, v := range msg[1:] {
		if v != 0 {
			m = append(m, i)
		}
	}
	return slices.Clip(m)
}
