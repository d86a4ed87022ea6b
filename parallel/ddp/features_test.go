package ddp

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
)

// The equivalence test is not vacuous: training on rank 0's slice alone ends elsewhere.
func TestEquivalenceDetectsMissingReduction(t *testing.T) {
	want, err := reference(false, 2, 2, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := reference(false, 1, 2, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	if compareModels(alone, want, equivTol) == nil {
		t.Fatal("one rank's data alone matched the global batch: the test cannot tell")
	}
}

func TestUnusedParameters(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		ok   bool
	}{{"default", nil, false}, {"find", []Option{FindUnusedParameters()}, true}, {"static", []Option{StaticGraph()}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			groups := comm.NewLocalGroups(2)
			c := &cluster{groups: groups}
			c.models = make([]*nn.Model, 2)
			c.ddps = make([]*DDP, 2)
			c.progs = make([]*Program, 2)
			for r := range 2 {
				c.models[r], _ = nn.NewModel(testnet.ExtraNet(), nn.WithSeed(int64(r)))
			}
			if err := c.each(func(r int) error {
				var err error
				c.ddps[r], err = New(context.Background(), c.models[r], groups[r], append(tc.opts, BucketCapBytes(128))...)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			for r := range 2 {
				var err error
				if c.progs[r], err = c.ddps[r].Compile(classify(2)); err != nil {
					t.Fatal(err)
				}
			}
			err := c.each(func(r int) error {
				for s := range 3 {
					c.models[r].Params.ZeroGrad()
					if err := feed(c.progs[r], s, 0, 2*r, 2*r+2); err != nil {
						return err
					}
					if err := c.progs[r].Run(context.Background()); err != nil {
						return err
					}
				}
				return nil
			})
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if err := sameBits(c.models[0], c.models[1]); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrUnusedParameters) || !strings.Contains(err.Error(), "extra.weight") ||
				!strings.Contains(err.Error(), "extra.bias") || !strings.Contains(err.Error(), "step 0") {
				t.Fatalf("want ErrUnusedParameters naming extra.weight and extra.bias at step 0, got %v", err)
			}
			t.Log(err)
		})
	}
}

func TestMismatchNamesRankAndParameter(t *testing.T) {
	groups := comm.NewLocalGroups(3)
	c := &cluster{groups: groups}
	models := make([]*nn.Model, 3)
	for r := range 3 {
		mod := convNet(false).(*nn.Sequential)
		if r == 2 {
			mod.Layers[len(mod.Layers)-1] = &nn.Linear{In: 6, Out: classes + 1}
		}
		models[r], _ = nn.NewModel(mod)
	}
	errs := make([]error, 3)
	_ = c.each(func(r int) error {
		_, errs[r] = New(context.Background(), models[r], groups[r])
		return nil
	})
	for r, err := range errs {
		if !errors.Is(err, ErrModelMismatch) || !strings.Contains(err.Error(), "rank 2: parameter fc.weight is [6 6] float32, rank 0: [5 6] float32") {
			t.Errorf("rank %d: want a mismatch naming rank 2 and fc.weight, got %v", r, err)
		}
	}
	t.Log(errs[0])
}

// A rank that dies in the middle of backward makes the others fail with an error naming
// it, within the test's deadline (no hang).
func TestDeadRankDuringBackward(t *testing.T) {
	const world = 3
	net := comm.NewLocalNetwork(world)
	groups := make([]comm.Group, world)
	for r := range groups {
		groups[r] = comm.NewGroup(net.Transport(r))
	}
	c := &cluster{groups: groups, models: make([]*nn.Model, world), ddps: make([]*DDP, world), progs: make([]*Program, world)}
	for r := range world {
		c.models[r], _ = nn.NewModel(convNet(true), nn.WithSeed(1))
	}
	if err := c.each(func(r int) error {
		var err error
		c.ddps[r], err = New(context.Background(), c.models[r], groups[r], BucketCapBytes(64), FirstBucketBytes(32), SyncBatchNorm())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for r := range world {
		var opts []nn.BuildOption
		if r == world-1 {
			grads := 0
			opts = append(opts, nn.WithGradHook(func(p *nn.Param) error {
				if grads++; grads == 8+3 { // step 1 (8 gradients a step), third gradient
					net.Kill(world - 1)
					return errors.New("killed")
				}
				return nil
			}))
		}
		var err error
		if c.progs[r], err = c.ddps[r].Compile(classify(2), opts...); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, world)
	if err := c.each(func(r int) error {
		for s := range 3 {
			c.models[r].Params.ZeroGrad()
			if err := feed(c.progs[r], s, 0, 2*r, 2*r+2); err != nil {
				return err
			}
			if errs[r] = c.progs[r].Run(context.Background()); errs[r] != nil {
				return nil
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for r := range world - 1 {
		if !errors.Is(errs[r], comm.ErrPeerGone) || !strings.Contains(errs[r].Error(), "rank 2") || !strings.Contains(errs[r].Error(), "step 1") {
			t.Errorf("survivor %d: want ErrPeerGone naming rank 2 at step 1, got %v", r, errs[r])
		}
	}
	t.Log(errs[0])
}

// bf16 and fp16 compression: within 1e-2 of the exact global-batch training.
func TestCompressionHooks(t *testing.T) {
	const world, per, steps = 2, 2, 5
	want, err := reference(false, world, per, steps, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		hook CommHook
	}{{"bf16", Hooks.BF16Compress()}, {"fp16", Hooks.FP16Compress()}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, comm.NewLocalGroups(world), false, per, WithCommHook(tc.hook), BucketCapBytes(256))
			if err := c.train(steps, per, 1); err != nil {
				t.Fatal(err)
			}
			if err := compareModels(c.models[0], want, 1e-2); err != nil {
				t.Fatal(err)
			}
			if err := compareModels(c.models[0], want, 1e-7); err == nil {
				t.Fatal("compressed training equals exact training to 1e-7: the hook did not round")
			}
			if err := sameBits(c.models[0], c.models[1]); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPowerSGDInDDP: DDP with the PowerSGD hook (rank 1, from step 2) on 2 in-process ranks:
// training runs, the ranks' models stay bit-identical, and they differ from exact training
// (the compression acted).
func TestPowerSGDInDDP(t *testing.T) {
	const world, per, steps = 2, 2, 6
	hook, err := Hooks.PowerSGD(1, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, comm.NewLocalGroups(world), false, per, WithCommHook(hook), BucketCapBytes(4096))
	if err := c.train(steps, per, 1); err != nil {
		t.Fatal(err)
	}
	if err := sameBits(c.models[0], c.models[1]); err != nil {
		t.Fatal(err)
	}
	want, err := reference(false, world, per, steps, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := compareModels(c.models[0], want, 1e-6); err == nil {
		t.Fatal("PowerSGD training equals exact training to 1e-6: nothing was compressed")
	}
}

// From the timeline: in every step the first bucket's all-reduce starts before the last
// gradient is computed. Chrome traces of each rank and merged are valid JSON.
func TestOverlapTimeline(t *testing.T) {
	const world, per = 2, 4
	c := newCluster(t, comm.NewLocalGroups(world), true, per, BucketCapBytes(256), FirstBucketBytes(64), SyncBatchNorm())
	if err := c.train(4, per, 1); err != nil {
		t.Fatal(err)
	}
	s := c.ddps[0].Timeline().Summary()
	if !s.FirstLaunchBeforeLastGradient || s.Steps != 4 || s.Buckets < 2 {
		t.Fatalf("summary %+v: want bucket 0 launched before the last gradient in all 4 steps", s)
	}
	var traces []*bytes.Buffer
	for r := range world {
		var b bytes.Buffer
		if err := c.ddps[r].Timeline().WriteChromeTrace(&b); err != nil {
			t.Fatal(err)
		}
		traces = append(traces, &b)
	}
	var merged bytes.Buffer
	if err := timeline.MergeChromeTraces(&merged, traces[0], traces[1]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"all-reduce bucket 0"`, `"backward"`, `"optimizer"`, `"pid":1`} {
		if !strings.Contains(merged.String(), want) {
			t.Errorf("merged trace lacks %s", want)
		}
	}
	t.Logf("summary: %+v", s)
}

// Uneven inputs: rank 0 has 3 batches, rank 1 has 5. Inside Join, rank 0 shadows steps 3
// and 4 with zero gradients (divided by the world size, as PyTorch), and both ranks end with
// the same parameters, equal to one process replaying that schedule.
func TestJoinUnevenInputs(t *testing.T) {
	const world, per = 2, 2
	batches := []int{3, 5}
	// Reference: step s sums the gradients of the ranks that still have data, divided by 2.
	m, _ := nn.NewModel(convNet(false), nn.WithSeed(1))
	p, err := nn.Compile(m, classify(per))
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := newOpt(m)
	for s := range 5 {
		m.Params.ZeroGrad()
		for r := range world {
			if s < batches[r] {
				if err := feed(p, s, 0, r*per, (r+1)*per); err != nil {
					t.Fatal(err)
				}
				if err := p.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range m.Params.Grad {
			m.Params.Grad[i] /= world
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
	}
	c := newCluster(t, comm.NewLocalGroups(world), false, per, BucketCapBytes(256))
	if err := c.each(func(r int) error {
		return c.ddps[r].Join(context.Background(), func(ctx context.Context) error {
			for s := range batches[r] {
				c.models[r].Params.ZeroGrad()
				if err := feed(c.progs[r], s, 0, r*per, (r+1)*per); err != nil {
					return err
				}
				if err := c.progs[r].RunStep(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	for r := range world {
		if err := compareModels(c.models[r], m, equivTol); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if err := sameBits(c.models[0], c.models[1]); err != nil {
		t.Error(err)
	}
}
