package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Restarts after quick failures are spaced by --restart-backoff, doubling: with 0.2 s and
// two restarts the job waits 0.2 s then 0.4 s, and says so; 0 restarts at once.
func TestGprunRestartBackoff(t *testing.T) {
	t.Setenv("GPRUN_TEST_EXIT", "5") // rank 1 exits 5 at once
	for _, tc := range []struct {
		backoff string
		waits   []string
		min     time.Duration
	}{
		{"0.2", []string{"in 200ms (--restart-backoff)", "in 400ms (--restart-backoff)"}, 600 * time.Millisecond},
		{"0", nil, 0},
	} {
		t.Run(tc.backoff, func(t *testing.T) {
			var out bytes.Buffer
			start := time.Now()
			code := run(context.Background(), []string{"--nproc-per-node", "2", "--max-restarts", "2", "--restart-backoff", tc.backoff,
				"--", os.Args[0], "-test.run=^$"}, &out, &out, nil)
			took := time.Since(start)
			s := out.String()
			if code != 5 || strings.Count(s, "restarting the workers") != 2 {
				t.Errorf("exit %d, want 5 after 2 restarts; output:\n%s", code, s)
			}
			for i, w := range tc.waits {
				if !strings.Contains(s, fmt.Sprintf("restarting the workers (%d/2) %s", i+1, w)) {
					t.Errorf("restart %d does not say %q; output:\n%s", i+1, w, s)
				}
			}
			if tc.waits == nil && strings.Contains(s, "--restart-backoff") {
				t.Errorf("--restart-backoff 0 waited; output:\n%s", s)
			}
			if took < tc.min {
				t.Errorf("the job took %v, less than its waits (%v)", took, tc.min)
			}
			t.Logf("3 attempts took %v with --restart-backoff %s", took.Round(time.Millisecond), tc.backoff)
		})
	}
}

// A worker that ignores SIGTERM is killed --term-timeout after the others are stopped.
func TestGprunTermTimeout(t *testing.T) {
	t.Setenv("GPRUN_TEST_FAIL", "ignoreterm")
	for _, tc := range []struct {
		flag     string
		min, max time.Duration // from rank 1's failure to gprun's end
	}{
		{"0.5", 500 * time.Millisecond, 2500 * time.Millisecond},
		{"2", 2 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			var out bytes.Buffer
			code := run(context.Background(), []string{"--nproc-per-node", "2", "--term-timeout", tc.flag,
				"--", os.Args[0], "-test.run=^$"}, &out, &out, nil)
			end := time.Now()
			s := out.String()
			var failedAt int64
			if i := strings.Index(s, "[rank1]: failing at "); i >= 0 {
				fmt.Sscanf(s[i:], "[rank1]: failing at %d", &failedAt)
			}
			took := end.Sub(time.Unix(0, failedAt))
			if code != 1 || failedAt == 0 || took < tc.min || took > tc.max {
				t.Errorf("exit %d %v after rank 1 failed, want 1 within [%v, %v]; output:\n%s", code, took, tc.min, tc.max, s)
			}
			t.Logf("gprun --term-timeout %s ended %v after rank 1 failed", tc.flag, took.Round(time.Millisecond))
		})
	}
}
