package netbed

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// A bed of two hosts on a shaped link: the hosts reach each other (a TCP connection across
// the bridge, made by the hosts' own shells), and everything is gone after Close.
func TestBed(t *testing.T) {
	b := New(t, 2, Link{Rate: "1gbit", Delay: 500 * time.Microsecond})
	t.Logf("shaping: %s", b.Shaping)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Host 0 connects (bash's /dev/tcp) to a port of host 1 where nothing listens: "refused"
	// comes from host 1's stack, across the bridge (no route would time out or be unreachable).
	out, err := b.Command(ctx, 0, "bash", "-c", "exec 3<>/dev/tcp/"+b.Addr(1)+"/9 2>&1 || true").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused") {
		t.Fatalf("host 0 -> host 1: %v: %s", err, out)
	}
	ns := b.Namespace(0)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		t.Fatalf("%s still exists after Close", ns)
	}
}

func TestRateBits(t *testing.T) {
	for s, want := range map[string]int64{"1gbit": 1e9, "10gbit": 1e10, "500mbit": 5e8, "2.5gbit": 25e8} {
		if got, err := RateBits(s); err != nil || got != want {
			t.Errorf("RateBits(%q) = %d, %v", s, got, err)
		}
	}
	if _, err := RateBits("fast"); err == nil {
		t.Error("RateBits(fast) did not fail")
	}
}

// Create removes the namespaces of a bed whose creator died (here: a name with a pid that
// no process has) before it builds its own.
func TestStaleRemoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stale := namePrefix + "999999999-1-sw"
	if os.Geteuid() == 0 {
		if err := run(ctx, "ip", "netns", "add", stale); err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { removeNS(context.Background(), stale) })
	}
	New(t, 1, Link{})
	if _, err := os.Stat("/run/netns/" + stale); err == nil {
		t.Fatalf("%s left behind", stale)
	}
}
