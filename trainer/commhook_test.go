package trainer

import (
	"context"
	"fmt"
	"io"
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

// TestCommHookReachesDDP: WithCommHook (the -ddp-comm-hook flags of examples/imagenet) changes
// what DDP puts on the wire in a 2-rank run of 4 steps: bf16 and fp16 all-reduce the
// gradients as 16-bit values (every step, about the parameter count each); powersgd with
// start iteration 2 all-reduces the full float32 gradients at steps 0 and 1 only (the
// total stays under 2.5 parameter counts, where none gives 4). Bad values are refused.
func TestCommHookReachesDDP(t *testing.T) {
	if testing.Short() {
		t.Skip("trains")
	}
	const steps = 4
	params := 0
	for _, tc := range []struct {
		hook  CommHookConfig
		check func(t *testing.T, elems map[comm.DType]int)
	}{
		{CommHookConfig{Name: "none"}, func(t *testing.T, e map[comm.DType]int) {
			params = e[comm.Float32] / steps // gradients, plus a few metric scalars
		}},
		{CommHookConfig{Name: "bf16"}, func(t *testing.T, e map[comm.DType]int) {
			if e[comm.BFloat16] < steps*params*9/10 {
				t.Fatalf("bf16: %d bfloat16 elements all-reduced, want about %d", e[comm.BFloat16], steps*params)
			}
		}},
		{CommHookConfig{Name: "fp16"}, func(t *testing.T, e map[comm.DType]int) {
			if e[comm.Float16] < steps*params*9/10 {
				t.Fatalf("fp16: %d float16 elements all-reduced, want about %d", e[comm.Float16], steps*params)
			}
		}},
		{CommHookConfig{Name: "powersgd", PowerSGDRank: 2, PowerSGDStartIter: 2}, func(t *testing.T, e map[comm.DType]int) {
			if f := e[comm.Float32]; f < 2*params*9/10 || f > 5*params/2 {
				t.Fatalf("powersgd: %d float32 elements all-reduced, want 2 full steps (%d) plus little", f, 2*params)
			}
		}},
	} {
		t.Run(fmt.Sprintf("%s rank %d start %d", tc.hook.Name, tc.hook.PowerSGDRank, tc.hook.PowerSGDStartIter), func(t *testing.T) {
			cfg := smallConfig(t, t.TempDir())
			cfg.MaxSteps, cfg.Epochs = steps, 1
			cfg.CommHook = tc.hook
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
					_, errs[r] = fitRun(context.Background(), c, io.Discard)
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			t.Logf("all-reduced elements by dtype: %v", spies[0].elems)
			if params == 0 && tc.hook.Name != "none" {
				t.Skip("needs the none run first, for the parameter count")
			}
			tc.check(t, spies[0].elems)
		})
	}
	// The bad values of the flags (-ddp-comm-hook int8; powersgd with -powersgd-rank 0, or
	// -powersgd-start-iter 1), the others at the flags' defaults.
	for _, h := range []CommHookConfig{{Name: "int8"}, {Name: "powersgd", PowerSGDRank: 0, PowerSGDStartIter: 1000},
		{Name: "powersgd", PowerSGDRank: 1, PowerSGDStartIter: 1}} {
		if err := h.check("ddp"); err == nil {
			t.Errorf("%s rank %d start %d: accepted", h.Name, h.PowerSGDRank, h.PowerSGDStartIter)
		}
	}
	var c runConfig
	c.CommHook.Name = "bf16"
	if err := c.CommHook.check("zero3"); err == nil {
		t.Error("a comm hook with -strategy zero3: accepted")
	}
}
