package trainer

import (
	"context"
	"flag"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// allReduceSpy counts the elements of each dtype a rank all-reduces.
type allReduceSpy struct {
	comm.Group
	mu    sync.Mutex
	elems map[comm.DType]int
}

func (s *allReduceSpy) AllReduce(b comm.Buffer, op comm.Op) comm.Work {
	s.mu.Lock()
	s.elems[b.DType()] += b.Len()
	s.mu.Unlock()
	return s.Group.AllReduce(b, op)
}

// TestCommHookFlagReachesDDP: the -ddp-comm-hook flags, parsed as a user types them, change
// what DDP puts on the wire in a 2-rank run of 4 steps: bf16 and fp16 all-reduce the
// gradients as 16-bit values (every step, about the parameter count each); powersgd with
// -powersgd-start-iter 2 all-reduces the full float32 gradients at steps 0 and 1 only (the
// total stays under 2.5 parameter counts, where none gives 4). Bad values are refused.
func TestCommHookFlagReachesDDP(t *testing.T) {
	if testing.Short() {
		t.Skip("trains")
	}
	const steps = 4
	params := 0
	for _, tc := range []struct {
		args  []string
		check func(t *testing.T, elems map[comm.DType]int)
	}{
		{[]string{"-ddp-comm-hook", "none"}, func(t *testing.T, e map[comm.DType]int) {
			params = e[comm.Float32] / steps // gradients, plus a few metric scalars
		}},
		{[]string{"-ddp-comm-hook", "bf16"}, func(t *testing.T, e map[comm.DType]int) {
			if e[comm.BFloat16] < steps*params*9/10 {
				t.Fatalf("bf16: %d bfloat16 elements all-reduced, want about %d", e[comm.BFloat16], steps*params)
			}
		}},
		{[]string{"-ddp-comm-hook=fp16"}, func(t *testing.T, e map[comm.DType]int) {
			if e[comm.Float16] < steps*params*9/10 {
				t.Fatalf("fp16: %d float16 elements all-reduced, want about %d", e[comm.Float16], steps*params)
			}
		}},
		{[]string{"-ddp-comm-hook", "powersgd", "-powersgd-rank", "2", "-powersgd-start-iter", "2"}, func(t *testing.T, e map[comm.DType]int) {
			if f := e[comm.Float32]; f < 2*params*9/10 || f > 5*params/2 {
				t.Fatalf("powersgd: %d float32 elements all-reduced, want 2 full steps (%d) plus little", f, 2*params)
			}
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cfg := tinyConfig(t, t.TempDir())
			cfg.MaxSteps, cfg.Epochs = steps, 1
			fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
			var parsed Config
			parsed.RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg.CommHook = parsed.CommHook
			groups := comm.NewLocalGroups(2)
			spies := make([]*allReduceSpy, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				spies[r] = &allReduceSpy{Group: groups[r], elems: map[comm.DType]int{}}
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := cfg
					c.Group = spies[r]
					_, errs[r] = Run(context.Background(), c, io.Discard)
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			t.Logf("all-reduced elements by dtype: %v", spies[0].elems)
			if params == 0 && tc.args[1] != "none" {
				t.Skip("needs the none run first, for the parameter count")
			}
			tc.check(t, spies[0].elems)
		})
	}
	for _, args := range [][]string{{"-ddp-comm-hook", "int8"}, {"-ddp-comm-hook", "powersgd", "-powersgd-rank", "0"},
		{"-ddp-comm-hook", "powersgd", "-powersgd-start-iter", "1"}} {
		fs := flag.NewFlagSet("trainer", flag.ContinueOnError)
		var c Config
		c.RegisterFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := c.CommHook.check("ddp"); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	var c Config
	c.CommHook.Name = "bf16"
	if err := c.CommHook.check("zero3"); err == nil {
		t.Error("a comm hook with -strategy zero3: accepted")
	}
}
