package devddp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/devddp"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/ddp/commhook"
	"github.com/gorgonia-parallel/gp/train"
)

// extraNet is testnet.ExtraNet: its unused Linear lies first in the flat buffer, while for
// the arrival order it comes last (it never arrives). So the initial buckets (buffer order
// and size) are not those the arrival order gives, and the bucket rebuild changes them.
var extraNet = testnet.ExtraNet

// bnNet is testnet's convolutional net with BatchNorm.
func bnNet() nn.Module { return testnet.ConvNet(true) }

// rebuildOpts cut extraNet's buffer into other buckets by size than by arrival.
var rebuildOpts = []ddp.Option{ddp.FindUnusedParameters(), ddp.FirstBucketBytes(32), ddp.BucketCapBytes(256), ddp.LastBucketBytes(0)}

// per is each rank's batch in the tests against the host path.
const per = 2

// netSpec is a model and its training graph for onRanks: nil is the gorgonia perceptron.
type netSpec struct {
	module func() nn.Module
	build  nn.BuildFunc
}

func (n netSpec) model() (*nn.Model, error) { return nn.NewModel(n.module(), nn.WithSeed(1)) }

// hostCase is a DDP configuration trained on the host and on the device.
type hostCase struct {
	name    string
	opts    []ddp.Option
	module  func() nn.Module // testnet.ConvNet(false) when nil
	batches [world]int       // per rank; unequal runs the ranks inside Join
	differs bool             // opts change the result: the host without them is farther than tol
}

func (c hostCase) net() *netSpec {
	m := c.module
	if m == nil {
		m = func() nn.Module { return testnet.ConvNet(false) }
	}
	return &netSpec{module: m, build: testnet.Classify(per)}
}

// result is one path's outcome.
type result struct {
	params  [][]float32 // by rank: the parameters, then every float buffer
	buckets [][2]int    // rank 0's buckets (Lo, Hi) after training
}

// state is m's parameters followed by its float buffers (BatchNorm's running statistics).
func state(m *nn.Model) []float32 {
	out := append([]float32(nil), m.Params.Data...)
	for _, b := range m.Params.Buffers {
		out = append(out, b.Data...)
	}
	return out
}

// Device DDP equals host DDP on 2 in-process ranks training testnet's convolutional net
// (SGD with momentum, RunStep) under the features the device gets from ddp's reducer: the
// bucket rebuild with FindUnusedParameters (the buckets change after step 0,
// TestRebuildChangesBuckets, and end the same on both paths), StaticGraph (the unused
// parameters recorded in step 0 and marked ready before backward from step 1 on), Join with uneven inputs (rank 0 has 2 batches, rank 1 has 4: rank 0
// shadows steps 2-3 with zero gradients), the fp16 and bf16 compression hooks (the rounding
// and division happen in device memory), SyncBatchNorm (parameters and running statistics
// compared), and the hooks that compute in host memory, run on pinned copies of the device
// buckets: PowerSGD of rank 1 and 2 (plain averages for steps 0-1, compressed from step 2,
// every gradient matrix compressed), also inside Join (rank 0 shadows compressed steps 3-4),
// and a HookFunc (sum, then half the average, in Then).
// The tolerance is devddp's against the CPU (tol): the device's convolutions and GEMMs sum in
// other orders, nothing else differs.
func TestDeviceMatchesHost(t *testing.T) {
	cudatest.Require(t)
	psgd := func(r int) ddp.CommHook {
		h, err := commhook.PowerSGD(commhook.PowerSGDRank(r), commhook.PowerSGDStartIter(2), commhook.PowerSGDMinCompressionRate(1))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	halfAvg := ddp.HookFunc(func(g comm.Group, b *ddp.Bucket) comm.Work {
		return commhook.Then(g.AllReduce(comm.F32(b.Grad), comm.Sum), func() error {
			for i := range b.Grad {
				b.Grad[i] *= 0.5 / float32(g.Size())
			}
			return nil
		})
	})
	cases := []hostCase{
		{name: "rebuild", module: extraNet, opts: rebuildOpts, batches: [world]int{3, 3}},
		{name: "static graph", module: extraNet, opts: []ddp.Option{ddp.StaticGraph(), ddp.NoBucketRebuild()}, batches: [world]int{3, 3}},
		{name: "join", batches: [world]int{2, 4}},
		{name: "fp16", opts: []ddp.Option{ddp.WithCommHook(commhook.FP16Compress())}, batches: [world]int{3, 3}, differs: true},
		{name: "bf16", opts: []ddp.Option{ddp.WithCommHook(commhook.BF16Compress())}, batches: [world]int{3, 3}, differs: true},
		{name: "syncbn", module: bnNet, opts: []ddp.Option{ddp.SyncBatchNorm()}, batches: [world]int{3, 3}, differs: true},
		{name: "powersgd rank 1", opts: []ddp.Option{ddp.WithCommHook(psgd(1))}, batches: [world]int{4, 4}, differs: true},
		{name: "powersgd rank 2", opts: []ddp.Option{ddp.WithCommHook(psgd(2))}, batches: [world]int{4, 4}, differs: true},
		{name: "powersgd join", opts: []ddp.Option{ddp.WithCommHook(psgd(1))}, batches: [world]int{3, 5}, differs: true},
		{name: "hookfunc", opts: []ddp.Option{ddp.WithCommHook(halfAvg)}, batches: [world]int{3, 3}, differs: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host := hostRun(t, c)
			dev := devRun(t, c)
			for r := 1; r < world; r++ {
				if fmt.Sprint(dev.params[r]) != fmt.Sprint(dev.params[0]) {
					t.Fatalf("device: rank %d's parameters differ from rank 0's", r)
				}
			}
			if fmt.Sprint(dev.buckets) != fmt.Sprint(host.buckets) {
				t.Fatalf("device buckets %v, host buckets %v", dev.buckets, host.buckets)
			}
			w := testnet.MaxRel(dev.params[0], host.params[0])
			t.Logf("buckets %v: device within %.3g of host (tolerance %g)", dev.buckets, w, tol)
			if w > tol {
				t.Fatalf("device differs from host by %.3g (tolerance %g)\ndevice %v\nhost   %v", w, tol, dev.params[0], host.params[0])
			}
			if c.differs {
				// The option must show at this tolerance, or a device that ignored it (a
				// hook reducing in float32, BatchNorm on local statistics) would pass.
				plain := hostRun(t, hostCase{module: c.module, batches: c.batches})
				if e := testnet.MaxRel(dev.params[0], plain.params[0]); e <= tol {
					t.Fatalf("device within %.3g of the host without the option (tolerance %g): the option had no effect", e, tol)
				} else {
					t.Logf("%.3g from the host without the option", e)
				}
			}
		})
	}
}

// The rebuild case's buckets change after the first step, so that TestDeviceMatchesHost
// proves the device rebuilds.
func TestRebuildChangesBuckets(t *testing.T) {
	c := hostCase{module: extraNet, opts: rebuildOpts, batches: [world]int{1, 1}}
	m, err := c.net().model()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ddp.New(context.Background(), m, comm.NewLocalGroups(1)[0], c.opts...)
	if err != nil {
		t.Fatal(err)
	}
	before := bucketsOf(d)
	if after := hostRun(t, c).buckets; fmt.Sprint(before) == fmt.Sprint(after) {
		t.Fatalf("buckets %v before and after the rebuild", before)
	} else {
		t.Logf("buckets %v, after the rebuild %v", before, after)
	}
}

// step runs rank r's schedule of c.batches[r] steps (RunStep each) on p, inside d.Join
// when the ranks' batches differ.
func step(ctx context.Context, c hostCase, r int, d *ddp.DDP, p train.Program) error {
	loop := func(ctx context.Context) error {
		for s := range c.batches[r] {
			x, y := testnet.Batch(s, 0, r*per, (r+1)*per)
			if err := errors.Join(p.SetInput("images", x), p.SetInput("labels", y)); err != nil {
				return err
			}
			if err := train.RunStep(ctx, p); err != nil {
				return fmt.Errorf("step %d: %w", s, err)
			}
		}
		return nil
	}
	if c.batches[0] == c.batches[1] {
		return loop(ctx)
	}
	return d.Join(ctx, loop)
}

func bucketsOf(d *ddp.DDP) [][2]int {
	var out [][2]int
	for _, b := range d.Buckets() {
		out = append(out, [2]int{b.Lo, b.Hi})
	}
	return out
}

// hostRun trains c on world in-process host ranks (ddp over comm.NewLocalGroups), with
// onRanks' options. A rank that fails closes its group, so that the others fail too.
func hostRun(t *testing.T, c hostCase) result {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	groups := comm.NewLocalGroups(world)
	res := result{params: make([][]float32, world)}
	err := testnet.EachRank(world, time.Minute, func(r int) error {
		defer groups[r].Close(context.Background())
		net := c.net()
		m, err := net.model()
		if err != nil {
			return err
		}
		d, err := ddp.New(ctx, m, groups[r], append(append([]ddp.Option{}, baseOpts...), c.opts...)...)
		if err != nil {
			return err
		}
		p, err := d.Compile(net.build, nn.WithOptimizer(mustOpt(t, m, optimizers[0].new)))
		if err != nil {
			return err
		}
		defer p.Close()
		if err := step(ctx, c, r, d, p); err != nil {
			return err
		}
		res.params[r] = state(m)
		if r == 0 {
			res.buckets = bucketsOf(d)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("host: %v", err)
	}
	return res
}

// devRun trains c on world in-process device ranks.
func devRun(t *testing.T, c hostCase) result {
	res := result{params: make([][]float32, world)}
	err := onRanks(t, optimizers[0].new, c.net(), c.opts, nil, func(ctx context.Context, r int, k *rank) error {
		if err := step(ctx, c, r, k.d, k.p); err != nil {
			return err
		}
		if err := k.st.ToHost(ctx); err != nil {
			return err
		}
		res.params[r] = state(k.m)
		if r == 0 {
			res.buckets = bucketsOf(k.d)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("device: %v", err)
	}
	return res
}

// ddp.New refuses, naming ddp.WithBackend and the device backend, a backend made without a
// device or a reducer, one already accepted by a DDP of another model or of the same model,
// and one whose reducer spans another number of ranks than the DDP's group.
func TestWithBackendRefusals(t *testing.T) {
	cudatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	host := comm.NewLocalGroups(1)
	defer host[0].Close(ctx)
	build := gormlp.Fixed(1, 2)
	var ms [2]*nn.Model
	for i := range ms {
		if ms[i], err = nn.NewGraphModel(build); err != nil {
			t.Fatal(err)
		}
	}
	held := devddp.NewBackend(dev, sizeOne{}) // accepted by a DDP of ms[1]
	defer held.Close()
	if _, err := ddp.New(ctx, ms[1], host[0], ddp.WithBackend(held)); err != nil {
		t.Fatal(err)
	}
	if held.State() == nil || held.State().Model() != ms[1] {
		t.Fatal("ddp.New did not give the backend a device state of its model")
	}
	for _, tc := range []struct {
		name string
		m    *nn.Model
		be   *devddp.Backend
		want string
	}{
		{"another model", ms[0], held, "the backend already holds the device state of another model"},
		{"accepted twice", ms[1], held, "the backend was already accepted by a ddp.New of this model"},
		{"no device", ms[0], devddp.NewBackend(nil, sizeOne{}), "nil device or reducer"},
		{"no reducer", ms[0], devddp.NewBackend(dev, nil), "nil device or reducer"},
		{"another world", ms[0], devddp.NewBackend(dev, sizeTwo{}), "the DDP's group has world size 1 and the device reducer 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ddp.New(ctx, tc.m, host[0], ddp.WithBackend(tc.be))
			if tc.be != held {
				if tc.be.State() != nil {
					t.Error("a refused backend holds a device state")
				}
				tc.be.Close()
			}
			want := "ddp.WithBackend(*devddp.Backend): devddp: " + tc.want
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("ddp.New: %v, want an error containing %q", err, want)
			}
			t.Log(err)
		})
	}
}

// sizeOne is a Reducer of one rank that is never asked to reduce.
type sizeOne struct{ devddp.Reducer }

func (sizeOne) Size() int { return 1 }

// sizeTwo is a Reducer of two ranks that is never asked to reduce.
type sizeTwo struct{ devddp.Reducer }

func (sizeTwo) Size() int { return 2 }
