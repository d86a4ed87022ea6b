//go:build linux

package sysmon

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary run TestHelperLower as a child: Lower once, print the
// result and every thread's policy as JSON.
const helperEnv = "GP_SYSMON_TEST_HELPER"

type helperOut struct {
	Res      Result
	Err      string
	Policies map[int]uint32
	Threads  []int // sorted
}

func TestHelperLower(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper process only")
	}
	var out helperOut
	res, err := Lower()
	out.Res = res
	if err != nil {
		out.Err = err.Error()
	}
	tids, _ := threads()
	slices.Sort(tids)
	out.Threads = tids
	out.Policies = map[int]uint32{}
	for _, tid := range tids {
		if p, err := priorityOf(tid); err == nil {
			out.Policies[tid] = p.policy
		}
	}
	b, _ := json.Marshal(out)
	os.Stdout.Write(append(append([]byte("HELPER "), b...), '\n'))
}

func runHelper(t *testing.T, env ...string) helperOut {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLower$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), helperEnv+"=1"), env...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, b)
	}
	_, js, ok := strings.Cut(string(b), "HELPER ")
	if !ok {
		t.Fatalf("helper printed no result:\n%s", b)
	}
	js, _, _ = strings.Cut(js, "\n")
	var out helperOut
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		t.Fatalf("helper output %q: %v", js, err)
	}
	return out
}

// The test binary links no C, so the runtime's first thread after the main one is sysmon
// (runtime.main starts it before anything else): Lower must find exactly that thread, make
// it SCHED_IDLE and leave every other thread's policy alone. Where the cores are busy
// (make test), Lower may give up after findMax, which it says in Result.Reason: one of three
// helper processes must find the thread, and every one that finds a thread must find it.
func TestLowerFindsSysmon(t *testing.T) {
	found := 0
	for try := 0; try < 3 && found == 0; try++ {
		out := runHelper(t)
		if out.Err != "" {
			t.Fatalf("Lower: %s", out.Err)
		}
		if len(out.Threads) < 2 {
			t.Fatalf("threads %v: want the main thread and sysmon at least", out.Threads)
		}
		if out.Res.Thread == 0 {
			t.Logf("helper %d: nothing lowered: %s", try, out.Res.Reason)
			continue
		}
		found++
		if want := out.Threads[1]; out.Res.Thread != want || out.Res.Mode != Idle {
			t.Fatalf("Lower = %+v, want thread %d (the runtime's second thread) in mode %q", out.Res, want, Idle)
		}
		for tid, p := range out.Policies {
			want := uint32(schedNormal)
			if tid == out.Res.Thread {
				want = unix.SCHED_IDLE
			}
			if p != want {
				t.Errorf("thread %d: policy %d, want %d", tid, p, want)
			}
		}
	}
	if found == 0 {
		t.Fatal("no helper found the monitor thread")
	}
}

func TestLowerModes(t *testing.T) {
	for _, tc := range []struct {
		env     string
		mode    Mode
		changed bool
		err     string
	}{
		{"GP_SYSMON=default", Default, false, ""},
		{"GP_SYSMON=nice", Nice, true, ""},
		{"GP_SYSMON=fast", Default, false, `GP_SYSMON="fast"`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			out := runHelper(t, tc.env)
			// As in TestLowerFindsSysmon: on busy cores the thread may not be told apart.
			for try := 1; try < 3 && tc.changed && out.Res.Thread == 0 && out.Err == ""; try++ {
				t.Logf("helper %d: nothing lowered: %s", try, out.Res.Reason)
				out = runHelper(t, tc.env)
			}
			if tc.err != "" {
				if !strings.Contains(out.Err, tc.err) {
					t.Fatalf("Lower error %q, want one naming %s", out.Err, tc.err)
				}
				return
			}
			if out.Err != "" || out.Res.Mode != tc.mode || (out.Res.Thread != 0) != tc.changed {
				t.Fatalf("Lower = %+v, %q; want mode %q, a thread changed: %v", out.Res, out.Err, tc.mode, tc.changed)
			}
			for tid, p := range out.Policies {
				if p != schedNormal {
					t.Errorf("thread %d: policy %d; %s changes no policy", tid, p, tc.env)
				}
			}
		})
	}
}

// A thread that appears with the lowered priority (as one sysmon starts would) gets the
// normal one back from the watcher.
func TestWatchRestoresInheritedPriority(t *testing.T) {
	normal := priority{policy: schedNormal}
	low := priority{policy: unix.SCHED_IDLE}
	go watch(-1, normal, low)

	type got struct {
		tid int
		p   priority
		err error
	}
	res := make(chan got)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread() // a thread of its own, which exits with the goroutine
		tid := unix.Gettid()
		if err := setPriority(tid, low); err != nil {
			res <- got{err: err}
			return
		}
		deadline := time.Now().Add(20 * watchEvery)
		for {
			p, err := priorityOf(tid)
			if err != nil || p == normal || time.Now().After(deadline) {
				res <- got{tid, p, err}
				break
			}
			time.Sleep(watchEvery / 10)
		}
		<-release
	}()
	r := <-res
	close(release)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.p != normal {
		t.Fatalf("thread %d still has priority %+v after %v; want the watcher to restore %+v", r.tid, r.p, 20*watchEvery, normal)
	}
}

func TestModeFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want Mode
		ok   bool
	}{{"", Idle, true}, {"idle", Idle, true}, {"nice", Nice, true}, {"default", Default, true}, {"off", "", false}} {
		t.Setenv(Env, tc.v)
		m, err := ModeFromEnv()
		if (err == nil) != tc.ok || m != tc.want {
			t.Errorf("%s=%q: %q, %v; want %q, ok %v", Env, tc.v, m, err, tc.want, tc.ok)
		}
	}
}

// schedNormal is SCHED_OTHER (SCHED_NORMAL), which x/sys/unix does not name.
const schedNormal = 0

// The watcher's decision keeps sysmon lowered up to 2 runnable threads per core, restores it
// beyond, and lowers it again only below 1.5 per core.
func TestKeepLoweredFollowsLoad(t *testing.T) {
	for _, tc := range []struct {
		isLow bool
		load  float64
		want  bool
	}{
		{true, 2, true}, {true, 4, true}, {true, 4.1, false}, {true, 13, false},
		{false, 13, false}, {false, 3.5, false}, {false, 3, false}, {false, 2.9, true}, {false, 1, true},
	} {
		if got := keepLowered(tc.isLow, tc.load, 2); got != tc.want {
			t.Errorf("keepLowered(%v, load %g, 2 cores) = %v, want %v", tc.isLow, tc.load, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		n    int
		isOK bool
	}{
		{"0.52 0.58 0.59 3/276 22341\n", 3, true}, {"13.2 11.9 10.6 20/280 19231", 20, true},
		{"0.1 0.2", 0, false}, {"1 2 3 x/4 5", 0, false},
	} {
		if n, ok := parseRunnable(tc.in); n != tc.n || ok != tc.isOK {
			t.Errorf("parseRunnable(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.n, tc.isOK)
		}
	}
}

// The watcher discounts the reader and one monitor per local rank: with LOCAL_WORLD_SIZE=2
// on 2 cores, the two ranks' compute and monitors plus the reader (5 runnable) leave 2,
// under lowerBelow × cores, so a restored monitor is lowered again; at load 13 the 10 left
// keep it restored.
func TestOwnThreads(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
	}{{"", 2}, {"2", 3}, {"8", 9}, {"0", 2}, {"x", 2}} {
		t.Setenv("LOCAL_WORLD_SIZE", tc.env)
		if got := ownThreads(); got != tc.want {
			t.Errorf("LOCAL_WORLD_SIZE=%q: ownThreads() = %d, want %d", tc.env, got, tc.want)
		}
	}
	t.Setenv("LOCAL_WORLD_SIZE", "2")
	if own := ownThreads(); !keepLowered(false, float64(5-own), 2) || keepLowered(false, float64(13-own), 2) {
		t.Errorf("two ranks on 2 cores: 5 runnable must lower a restored monitor again and 13 must not (own threads %d)", own)
	}
}
