package tape_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
)

// The per-op device profile, switched on by StartProfile or by GP_TAPE_PROFILE=1 at
// Compile: every op that computes is counted once per Run under its kind (the graph's own
// count of each nn/ops kind and of gradient hooks, times the Runs), the op times add up to
// the device time, the memory peak is seen by the allocator too, and nothing is recorded
// while it is off. The emulator's events complete when recorded, so times are not checked.
func TestProfileCountsOps(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	const batch, hw, runs = 2, 16, 2
	compile := func(t *testing.T) *tape.Program {
		t.Helper()
		root, err := tinyResNet()
		if err != nil {
			t.Fatal(err)
		}
		m, err := nn.NewModel(root, nn.WithSeed(7))
		if err != nil {
			t.Fatal(err)
		}
		p, err := tape.Compile(d, m, nn.Classify(batch, []int{3, hw, hw}, 0.1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		if err := p.SetInput("images", make([]float32, batch*3*hw*hw)); err != nil {
			t.Fatal(err)
		}
		if err := p.SetInput("labels", []float32{1, 3}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(t *testing.T, p *tape.Program, n int) {
		t.Helper()
		for range n {
			if err := p.Run(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name string
		on   func(t *testing.T)
	}{
		{"StartProfile", func(t *testing.T) { tape.StartProfile(d) }},
		{"GP_TAPE_PROFILE=1", func(t *testing.T) { t.Setenv(tape.ProfileEnv, "1") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tape.StopProfile(d)
			t.Cleanup(func() { tape.StopProfile(d) })
			run(t, compile(t), 1) // off: nothing recorded, nothing printed
			var buf bytes.Buffer
			if pr := tape.DeviceProfile(d); pr != nil {
				t.Fatalf("profile on before it was switched on: %+v", pr.Report())
			}
			if err := tape.WriteProfile(&buf, d, 5); err != nil || buf.Len() != 0 {
				t.Fatalf("WriteProfile while off: %q, %v; want nothing", buf.String(), err)
			}

			c.on(t)
			p := compile(t)
			run(t, p, runs)
			pr := tape.DeviceProfile(d)
			if pr == nil {
				t.Fatal("no profile after the profiled runs")
			}
			r := pr.Report()
			if r.Runs != runs {
				t.Errorf("%d runs profiled, want %d", r.Runs, runs)
			}

			// The graph's own count of each kind.
			want := map[string]int{}
			for _, n := range p.CPU().Graph().AllNodes() {
				if n.Op() == nil {
					continue
				}
				if dsc, ok := ops.Describe(n.Op()); ok {
					want[dsc.Kind.String()]++
				} else if fmt.Sprintf("%T", n.Op()) == "*nn.gradHookOp" {
					want["GradHook"]++
				}
			}
			if want["Conv2d"] == 0 || want["GradHook"] == 0 {
				t.Fatalf("the graph has no convolutions or gradient hooks: %v", want)
			}
			got := map[string]tape.OpTime{}
			var sum time.Duration
			for i, o := range r.Ops {
				got[o.Op] = o
				sum += o.Time
				if i > 0 && o.Time > r.Ops[i-1].Time {
					t.Errorf("ops not by device time: %s (%v) after %s (%v)", o.Op, o.Time, r.Ops[i-1].Op, r.Ops[i-1].Time)
				}
				if o.Calls != runs*o.Nodes {
					t.Errorf("%s: %d calls of %d nodes in %d runs", o.Op, o.Calls, o.Nodes, runs)
				}
			}
			for kind, n := range want {
				if got[kind].Nodes != n {
					t.Errorf("%s: %d nodes profiled, the graph has %d", kind, got[kind].Nodes, n)
				}
			}
			// Each node once per run, and each kind's nodes add up to the kind.
			perKind := map[string]tape.OpTime{}
			for i, nt := range r.Nodes {
				if nt.Calls != runs {
					t.Errorf("node %s: %d calls in %d runs", nt.Node, nt.Calls, runs)
				}
				if i > 0 && nt.Time > r.Nodes[i-1].Time {
					t.Errorf("nodes not by device time: %s after %s", nt.Node, r.Nodes[i-1].Node)
				}
				k := perKind[nt.Op]
				k.Nodes++
				k.Calls += nt.Calls
				k.Time += nt.Time
				perKind[nt.Op] = k
			}
			for _, o := range r.Ops {
				if k := perKind[o.Op]; k.Nodes != o.Nodes || k.Calls != o.Calls || k.Time != o.Time {
					t.Errorf("%s: its nodes add up to %+v, the kind says %+v", o.Op, k, o)
				}
			}
			if sum != r.DeviceTime {
				t.Errorf("op times sum to %v, device time %v", sum, r.DeviceTime)
			}
			if r.PeakInUse <= 0 || r.PeakNode == "" || r.PeakInUse > r.Memory.PeakInUse {
				t.Errorf("memory peak %d bytes after %q; the allocator's peak %d", r.PeakInUse, r.PeakNode, r.Memory.PeakInUse)
			}
			if r.Memory.Hits+r.Memory.Misses == 0 {
				t.Errorf("allocator statistics empty: %+v", r.Memory)
			}

			const top = 3
			if err := tape.WriteProfile(&buf, d, top); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			t.Logf("\n%s", out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			// header; column names, top kinds, "(n more kinds of op)"; column names, top
			// nodes, "(n more nodes)"; memory
			if len(lines) != 1+2*(top+2)+1 || !strings.Contains(lines[0], fmt.Sprintf("%d runs", runs)) ||
				!strings.HasPrefix(lines[2], r.Ops[0].Op) || lines[2+top] != fmt.Sprintf("(%d more kinds of op)", len(r.Ops)-top) ||
				!strings.HasPrefix(lines[4+top], r.Nodes[0].Node) || lines[4+2*top] != fmt.Sprintf("(%d more nodes)", len(r.Nodes)-top) ||
				!strings.HasPrefix(lines[5+2*top], "memory: peak") {
				t.Errorf("table:\n%s", out)
			}

			if tape.StopProfile(d) != pr || tape.DeviceProfile(d) != nil {
				t.Fatal("StopProfile did not return the profile and turn it off")
			}
			run(t, p, 1)
			if r2 := pr.Report(); r2.Runs != runs || tape.DeviceProfile(d) != nil {
				t.Errorf("a run after StopProfile recorded (%d runs) or restarted the profile", r2.Runs)
			}
		})
	}
}

// A GP_TAPE_PROFILE that is neither 1 nor 0 fails Compile, naming the variable and value.
func TestProfileEnvRefused(t *testing.T) {
	d := device(t)
	t.Setenv(tape.ProfileEnv, "yes")
	root, err := tinyResNet()
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(root)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tape.Compile(d, m, nn.Classify(2, []int{3, 16, 16}, 0))
	if err == nil {
		p.Close()
		t.Fatal("Compile under GP_TAPE_PROFILE=yes succeeded")
	}
	if !strings.Contains(err.Error(), `GP_TAPE_PROFILE="yes"`) {
		t.Fatalf("Compile: %v, want the variable and its value named", err)
	}
}
