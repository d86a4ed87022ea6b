package netbed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/netbed"
)

// A job of all-reduces across 2 hosts (2 ranks each: hierarchical collectives over TCP
// between the hosts) completes, every sum checked, over links with a 1 ms one-way delay.
func TestAllReduceOverDelay(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	bed := netbed.New(t, 2, netbed.Link{Rate: "1gbit", Delay: time.Millisecond})
	t.Logf("links: %s", bed.Shaping)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j := startJob(t, ctx, bed, 2, []string{"GP_FAULT_STEPS=5", "GP_COMM_TIMEOUT=20s", "GP_RDZV_TIMEOUT=20s"})
	for r, out := range j.wait(t, 40*time.Second) {
		if !strings.Contains(out, "done") {
			t.Errorf("rank %d did not finish:\n%s", r, out)
		}
	}
}
