package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// stallLog keeps the records a group logs, with their times.
type stallLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *stallLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *stallLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *stallLog) WithGroup(string) slog.Handler            { return h }
func (h *stallLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// stalls returns the stall warnings by rank: their times and reports.
func (h *stallLog) stalls() map[int][]stallWarning {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int][]stallWarning{}
	for _, r := range h.recs {
		if r.Message != "comm: collective stalled" {
			continue
		}
		w := stallWarning{at: r.Time}
		rank := -1
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "rank":
				rank = int(a.Value.Int64())
			case "report":
				w.report = a.Value.String()
			}
			return true
		})
		out[rank] = append(out[rank], w)
	}
	return out
}

type stallWarning struct {
	at     time.Time
	report string
}

// stallPrelude runs the collectives before the stall: seq 1 an all-reduce of 1024 float32,
// seq 2 a barrier, seq 3 a broadcast of 512 float64 (4 KiB), the last op the stalled rank ran.
func stallPrelude(ctx context.Context, g Group) error {
	for _, w := range []Work{g.AllReduce(F32(make([]float32, 1024)), Sum), g.Barrier(), g.Broadcast(F64(make([]float64, 512)), 0)} {
		if err := w.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// wantLastOp is how the reports describe the stalled rank's last collective (stallPrelude's).
const wantLastOp = "not arrived: rank 1 (issued up to seq 3; last: seq 3 broadcast float64 x 512 (4.0 KiB), completed in"

// Rank 1 skips a collective the others run: after the warning threshold each waiting rank
// logs, once, a report naming rank 1 and its last collective; at the timeout the collective
// fails with a *TimeoutError (or, on the rank that did not time out first, the remote copy of
// one) naming them too.
func TestStallNamesMissingRank(t *testing.T) {
	for _, mk := range abortMakers {
		t.Run(mk.name, func(t *testing.T) {
			const warn, timeout = 200 * time.Millisecond, 2 * time.Second
			before := runtime.NumGoroutine()
			logs := &stallLog{}
			gs := mk.mk(t, 3, WithTimeout(timeout), WithWarnAfter(warn), WithLogger(slog.New(logs)))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stalledAt time.Time
			ready := make(chan struct{})   // the prelude is over on rank 0: the stall begins
			waiting := make(chan struct{}) // closed once ranks 0 and 2 have given up on seq 4
			var others sync.WaitGroup
			others.Add(2)
			go func() { others.Wait(); close(waiting) }()
			errs := onAll(gs, func(g Group) error {
				if err := stallPrelude(ctx, g); err != nil {
					if g.Rank() != 1 {
						others.Done()
					}
					return err
				}
				if g.Rank() == 1 {
					<-waiting // skips seq 4 until the others have given up on it
					return nil
				}
				if g.Rank() == 0 {
					stalledAt = time.Now()
					close(ready)
				}
				defer others.Done()
				<-ready
				return g.AllReduce(F32(make([]float32, 1024)), Sum).Wait(ctx)
			})
			took := time.Since(stalledAt)
			if errs[1] != nil {
				t.Fatalf("rank 1: %v", errs[1])
			}
			for _, r := range []int{0, 2} {
				err := errs[r]
				if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), wantLastOp) {
					t.Errorf("rank %d: want a timeout naming rank 1's last op %q, got %v", r, wantLastOp, err)
				}
			}
			// A rank whose question to its peers goes unanswered within the answer wait (a
			// tenth of the timeout) reports them as silent instead: on a loaded machine one of
			// the two timing-out ranks may, so the test wants one report that names rank 1 as
			// not arrived, and no report that names it wrongly.
			var named *TimeoutError
			found := false
			for _, r := range []int{0, 2} {
				var te *TimeoutError
				if !errors.As(errs[r], &te) {
					continue
				}
				found = true
				rep := te.Report
				switch got := rep.NotArrived(); {
				case rep.Seq != 4:
					t.Errorf("rank %d: report of seq %d, want seq 4", r, rep.Seq)
				case slices.Equal(got, []int{1}):
					named = te
				case len(got) != 0 || !slices.Contains(rep.Silent(), 1):
					t.Errorf("rank %d: report names %v as not arrived and %v as silent, want rank 1 in one of them", r, got, rep.Silent())
				default:
					t.Logf("rank %d: rank 1 did not answer in time: %v", r, te)
				}
			}
			switch {
			case !found:
				t.Errorf("no rank failed with a *TimeoutError: %v; %v", errs[0], errs[2])
			case named == nil:
				t.Errorf("no timeout report names rank 1 as not arrived: %v; %v", errs[0], errs[2])
			default:
				t.Logf("timeout error: %v", named)
			}
			if took > timeout+3*time.Second {
				t.Errorf("the stalled collective failed %v after it began, timeout %v", took, timeout)
			}
			stalls := logs.stalls()
			for _, r := range []int{0, 2} {
				ws := stalls[r]
				if len(ws) != 1 {
					t.Errorf("rank %d logged %d stall warnings, want 1: %v", r, len(ws), ws)
					continue
				}
				if !strings.Contains(ws[0].report, wantLastOp) || !strings.Contains(ws[0].report, "; arrived: ranks [") {
					t.Errorf("rank %d's warning: %s", r, ws[0].report)
				}
				if lag := ws[0].at.Sub(stalledAt); lag < warn || lag > warn+time.Second {
					t.Errorf("rank %d warned %v after the stall began, threshold %v", r, lag, warn)
				}
				t.Logf("rank %d warned %v after the stall: %s", r, ws[0].at.Sub(stalledAt).Round(time.Millisecond), ws[0].report)
			}
			if len(stalls[1]) != 0 {
				t.Errorf("rank 1 was in no collective but warned: %v", stalls[1])
			}
			closeAll(gs)
			noGoroutineLeak(t, before)
		})
	}
}

// A rank that only sleeps past the warning threshold is reported, and the collective then
// completes: a warning fails nothing.
func TestStallWarningThenCompletes(t *testing.T) {
	logs := &stallLog{}
	gs := localMaker(t, 2, WithTimeout(10*time.Second), WithWarnAfter(50*time.Millisecond), WithLogger(slog.New(logs)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noErrors(t, onAll(gs, func(g Group) error {
		if err := stallPrelude(ctx, g); err != nil {
			return err
		}
		if g.Rank() == 1 {
			time.Sleep(300 * time.Millisecond)
		}
		return g.AllReduce(F32(make([]float32, 1024)), Sum).Wait(ctx)
	}))
	ws := logs.stalls()[0]
	if len(ws) != 1 || !strings.Contains(ws[0].report, wantLastOp) {
		t.Fatalf("rank 0's warnings: %v", ws)
	}
	if len(logs.stalls()[1]) != 0 {
		t.Errorf("rank 1 warned: %v", logs.stalls()[1])
	}
}

// A peer that does not answer (here: a transport with no group behind it, as a stopped
// process) is reported as such, and the timeout still fires.
func TestStallSilentPeer(t *testing.T) {
	net := NewLocalNetwork(3)
	logs := &stallLog{}
	opts := []Option{WithTimeout(time.Second), WithWarnAfter(100 * time.Millisecond), WithLogger(slog.New(logs))}
	gs := []Group{NewGroup(net.Transport(0), opts...), NewGroup(net.Transport(2), opts...)}
	defer closeAll(gs)
	defer net.Transport(1).Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := onAll(gs, func(g Group) error { return g.Barrier().Wait(ctx) })
	var te *TimeoutError
	if !errors.As(errs[0], &te) && !errors.As(errs[1], &te) {
		t.Fatalf("want a *TimeoutError, got %v; %v", errs[0], errs[1])
	}
	if got := te.Report.Silent(); !slices.Equal(got, []int{1}) || !strings.Contains(te.Error(), "no answer: rank 1") {
		t.Errorf("silent %v in %v", got, te)
	}
	if ws := logs.stalls()[te.Report.Rank]; len(ws) != 1 || !strings.Contains(ws[0].report, "no answer: rank 1") {
		t.Errorf("warnings of rank %d: %v", te.Report.Rank, ws)
	}
}

func TestTimeoutsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		timeout time.Duration
		warn    time.Duration
		connect time.Duration
		wantErr string
	}{
		{env: nil, timeout: 30 * time.Minute, warn: 30 * time.Second, connect: 5 * time.Minute},
		{env: map[string]string{TimeoutEnv: "2s"}, timeout: 2 * time.Second, warn: time.Second, connect: 5 * time.Minute},
		{env: map[string]string{TimeoutEnv: "1h", WarnAfterEnv: "0", RendezvousTimeoutEnv: "90s"}, timeout: time.Hour, connect: 90 * time.Second},
		{env: map[string]string{TimeoutEnv: "10"}, wantErr: `GP_COMM_TIMEOUT="10" is not a duration`},
		{env: map[string]string{TimeoutEnv: "0s"}, wantErr: `GP_COMM_TIMEOUT="0s": the duration must be positive`},
		{env: map[string]string{WarnAfterEnv: "-1s"}, wantErr: `GP_COMM_WARN_AFTER="-1s": the duration must be positive`},
		{env: map[string]string{RendezvousTimeoutEnv: "soon"}, wantErr: `GP_RDZV_TIMEOUT="soon" is not a duration`},
	} {
		t.Run(fmt.Sprint(tc.env), func(t *testing.T) {
			for _, v := range []string{TimeoutEnv, WarnAfterEnv, RendezvousTimeoutEnv} {
				t.Setenv(v, tc.env[v])
			}
			opts, err := timeoutsFromEnv()
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(fmt.Sprint(err), tc.wantErr) {
					t.Fatalf("want %q, got %v", tc.wantErr, err)
				}
				// InitFromConfig refuses it before it dials anything.
				_, err = InitFromConfig(context.Background(), launchenv.Env{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 1})
				if !strings.Contains(fmt.Sprint(err), "rank 1: comm: invalid argument: "+tc.wantErr) {
					t.Errorf("InitFromConfig: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := newConfig(opts)
			if c.timeout != tc.timeout || c.warnAfter != tc.warn || c.connectTimeout != tc.connect {
				t.Errorf("timeout %v, warn %v, connect %v", c.timeout, c.warnAfter, c.connectTimeout)
			}
			// Explicit options win over the environment.
			if c := newConfig(append(opts, WithTimeout(time.Minute))); c.timeout != time.Minute {
				t.Errorf("WithTimeout after the environment: %v", c.timeout)
			}
		})
	}
}

// noGoroutineLeak waits (up to 5 s) for the goroutine count to fall back to before.
func noGoroutineLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// stallWorker is the process scenario "stall": rank 1 skips the all-reduce after
// stallPrelude, waiting instead in a receive that fails once rank 0's timeout has aborted the
// group; rank 0 prints its error, which must name rank 1 and its last op. The timeouts come
// from GP_COMM_TIMEOUT and GP_COMM_WARN_AFTER.
func stallWorker(ctx context.Context, g Group) error {
	if err := stallPrelude(ctx, g); err != nil {
		return err
	}
	if g.Rank() == 1 {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for {
			// The receive's own timeouts (GP_COMM_TIMEOUT too) are not rank 0's abort: wait on.
			err := g.Recv(F32(make([]float32, 1)), 0, 7).Wait(ctx)
			var re *RemoteError
			if errors.As(err, &re) || ctx.Err() != nil {
				fmt.Println("rank 1 saw:", err)
				return nil
			}
		}
	}
	start := time.Now()
	err := g.AllReduce(F32(make([]float32, 1024)), Sum).Wait(ctx)
	var te *TimeoutError
	if !errors.As(err, &te) || !slices.Equal(te.Report.NotArrived(), []int{1}) || !strings.Contains(err.Error(), wantLastOp) {
		return fmt.Errorf("want a *TimeoutError naming rank 1's last op %q, got %v", wantLastOp, err)
	}
	fmt.Printf("failed after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	return nil
}

// Real processes over TCP and shared memory, timeouts from the environment: rank 0 warns
// once about rank 1 after GP_COMM_WARN_AFTER and fails at GP_COMM_TIMEOUT naming it.
func TestProcessesStall(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			start := time.Now()
			outs, errs := spawn(t, 2, "stall", func(int) []string {
				return []string{"GP_COMM_TRANSPORT=" + tr, "GP_COMM_TIMEOUT=2s", "GP_COMM_WARN_AFTER=200ms"}
			})
			for r := range 2 {
				if errs[r] != nil {
					t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("the job took %v", took)
			}
			if n := strings.Count(outs[0], `msg="comm: collective stalled"`); n != 1 || !strings.Contains(outs[0], "not_arrived=[1]") || !strings.Contains(outs[0], wantLastOp) {
				t.Errorf("rank 0 logged %d stall warnings, want 1 naming rank 1:\n%s", n, outs[0])
			}
			if strings.Contains(outs[1], "collective stalled") {
				t.Errorf("rank 1 was in no collective but warned:\n%s", outs[1])
			}
			t.Logf("rank 0:\n%s", outs[0])
		})
	}
}
