package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("GPRUN_TEST_ETCD_WORKER") != "" {
		etcdWorker()
		os.Exit(0)
	}
	if mode := os.Getenv("GPRUN_TEST_C10D"); mode != "" {
		os.Exit(c10dWorker(mode))
	}
	if mode := os.Getenv("GPRUN_TEST_FAIL"); mode != "" {
		os.Exit(failWorker(mode))
	}
	if code := os.Getenv("GPRUN_TEST_EXIT"); code != "" {
		if os.Getenv("RANK") == "1" && code != "0" {
			os.Stdout.WriteString("failing\n")
			os.Exit(5)
		}
		os.Stdout.WriteString("rank " + os.Getenv("RANK") + " of " + os.Getenv("WORLD_SIZE") + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestGprun(t *testing.T) {
	for _, tc := range []struct {
		exit     string
		wantCode int
		want     string
	}{
		{"0", 0, "[rank1]: rank 1 of 2"},
		{"5", 5, "gprun: rank 1 (local rank 1) failed: exit status 5 (after 1 restarts)"},
	} {
		t.Setenv("GPRUN_TEST_EXIT", tc.exit)
		var out bytes.Buffer
		code := run(context.Background(), []string{"--nproc-per-node", "2", "--max-restarts", "1", "--", os.Args[0], "-test.run=^$"}, &out, &out, nil)
		if code != tc.wantCode || !strings.Contains(out.String(), tc.want) {
			t.Errorf("exit %d, want %d; output:\n%s", code, tc.wantCode, out.String())
		}
	}
}
