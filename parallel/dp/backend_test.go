package dp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// recorder is the host backend with the DataParallel's calls written down, and Accept
// refusing with refuse when set.
type recorder struct {
	*hostBackend
	calls  []string
	refuse error
}

func (r *recorder) Accept(m *nn.Model, s Settings) error {
	if r.refuse != nil {
		return r.refuse
	}
	return r.hostBackend.Accept(m, s)
}

func (r *recorder) Begin(ctx context.Context, n int, training bool) error {
	r.calls = append(r.calls, fmt.Sprintf("Begin(%d, %v)", n, training))
	return r.hostBackend.Begin(ctx, n, training)
}

func (r *recorder) Reduce(ctx context.Context, execs []Executor, ws []float32) error {
	r.calls = append(r.calls, fmt.Sprintf("Reduce(%d, %v)", len(execs), ws))
	return r.hostBackend.Reduce(ctx, execs, ws)
}

func (r *recorder) Abort() error { r.calls = append(r.calls, "Abort"); return r.hostBackend.Abort() }

func (r *recorder) Step(ctx context.Context) error {
	r.calls = append(r.calls, "Step")
	return r.hostBackend.Step(ctx)
}

// The DataParallel drives every backend the same way: Begin with the active replicas, then
// Reduce with the chunks' weights (n_i/N, 1 under WithSumLoss) or, when a replica failed,
// Abort; eval runs reduce nothing; Step comes after a training Run only. What the backend
// refuses at Accept fails New, and so does a device list the backend does not run on.
func TestBackendProtocol(t *testing.T) {
	badLabels := func(b Batch) Batch {
		b.Inputs["labels"] = slices.Clone(b.Inputs["labels"])
		b.Inputs["labels"][b.N-1] = classes + 2 // in the last replica's chunk
		return b
	}
	for _, c := range []struct {
		name  string
		n     int
		opts  []Option
		edit  func(Batch) Batch
		calls string // after a Run and, when it succeeded, a Step
		err   string // of the Run, or of the Step
	}{
		{name: "uneven", n: 5, calls: "[Begin(2, true) Reduce(2, [0.6 0.4]) Step]"},
		{name: "one sample one replica", n: 1, calls: "[Begin(1, true) Reduce(1, [1]) Step]"},
		{name: "sum loss", n: 4, opts: []Option{WithSumLoss()}, calls: "[Begin(2, true) Reduce(2, [1 1]) Step]"},
		{name: "replica fails", n: 7, edit: badLabels, calls: "[Begin(2, true) Abort]", err: "dp: replica 1"},
		{name: "eval", n: 4, opts: []Option{WithBuildOptions(nn.Training(false)), WithGather("logits")}, calls: "[Begin(2, false)]", err: "Step before a training Run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newModel(t, convNet())
			segs, err := optim.Segments(m.Params, 0)
			if err != nil {
				t.Fatal(err)
			}
			sgd, err := optim.NewSGD(segs, 0.1)
			if err != nil {
				t.Fatal(err)
			}
			r := &recorder{hostBackend: &hostBackend{devs: CPUs(2)}}
			opts := append([]Option{WithBackend(r), WithBuildOptions(nn.WithOptimizer(sgd))}, c.opts...)
			d, err := New(m, classify, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			b := batch(1, c.n)
			if c.edit != nil {
				b = c.edit(b)
			}
			ctx := context.Background()
			_, err = d.Run(ctx, b)
			if err == nil {
				err = d.Step(ctx)
			}
			if got := fmt.Sprint(r.calls); got != c.calls {
				t.Errorf("calls %s, want %s", got, c.calls)
			}
			if (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one saying %q", err, c.err)
			}
		})
	}

	m := newModel(t, convNet())
	refusal := errors.New("WithSumLoss: this backend cannot weigh chunks by 1")
	for _, c := range []struct {
		name string
		opts []Option
		want string
	}{
		{"accept refuses", []Option{WithBackend(&recorder{hostBackend: &hostBackend{devs: CPUs(2)}, refuse: refusal})}, "dp: WithSumLoss: this backend"},
		{"devices differ", []Option{WithBackend(&recorder{hostBackend: &hostBackend{devs: CPUs(2)}}), WithReplicas(3)}, "WithDevices lists [cpu:0 cpu:1 cpu:2], the backend (*dp.recorder) runs on [cpu:0 cpu:1]"},
		{"no devices", []Option{WithBackend(&recorder{hostBackend: &hostBackend{}})}, "has no devices"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := New(m, classify, c.opts...)
			if err == nil {
				d.Close()
				t.Fatal("New: no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v, want it to say %q", err, c.want)
			}
			if c.name == "accept refuses" && !errors.Is(err, refusal) {
				t.Fatalf("New: %v does not wrap the backend's error", err)
			}
		})
	}
}
