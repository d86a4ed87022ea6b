package devzero_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// recorder is an NCCL group that notes, at each reduce-scatter, how many gradients the
// backward had handed over, and how many all-gathers were issued before it.
type recorder struct {
	*nccl.Group
	mu      sync.Mutex
	grads   int   // gradient hooks run so far in this Run
	atRS    []int // grads at each reduce-scatter
	gathers int
}

func (r *recorder) AllGatherDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, wait, done driver.Event) nccl.DeviceWork {
	r.mu.Lock()
	r.gathers++
	r.mu.Unlock()
	return r.Group.AllGatherDeviceAfter(dst, src, count, dt, wait, done)
}

func (r *recorder) ReduceScatterDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, op comm.Op, wait, done driver.Event) nccl.DeviceWork {
	r.mu.Lock()
	r.atRS = append(r.atRS, r.grads)
	r.mu.Unlock()
	return r.Group.ReduceScatterDeviceAfter(dst, src, count, dt, op, wait, done)
}

// Each unit's reduce-scatter is issued as soon as the backward has handed over the unit's
// last gradient, not after the backward: with the odd model's two units (w3, then w2 and
// w1), the first reduce-scatter goes out after 1 of the 3 gradients (w3's, the first the
// backward makes), the second after all 3. The gathers: the body (w1, w2) and the head
// (w3) in forward, and the body again in backward; the head, needed again right after its
// forward, stays gathered (3 all-gathers). One rank (an NCCL group of one).
func TestReduceScatterDuringBackward(t *testing.T) {
	cudatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, g := oneRank(t)
	rec := &recorder{Group: g}
	md := models[1]
	build := md.build(4)
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	e, _, err := newEngine(ctx, dev, m, rec, adamOpts(md.opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// A user's gradient hook runs before the engine's (its options come first).
	p, err := e.Compile(build, nn.WithGradHook(func(*nn.Param) error {
		rec.mu.Lock()
		rec.grads++
		rec.mu.Unlock()
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x, y := make([]float32, 4*gormlp.In), make([]float32, 4*gormlp.Out)
	gormlp.Data(x, y, 0, 4)
	if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	units := len(e.Units())
	t.Logf("%d units: %d all-gathers; reduce-scatters issued after %v of %d gradients", units, rec.gathers, rec.atRS, rec.grads)
	if units != 2 || rec.gathers != 3 || len(rec.atRS) != units {
		t.Fatalf("%d units, %d all-gathers, %d reduce-scatters: want 2 units, 3 all-gathers, 2 reduce-scatters", units, rec.gathers, len(rec.atRS))
	}
	if rec.atRS[0] >= rec.grads || rec.atRS[1] != rec.grads {
		t.Fatalf("reduce-scatters issued after %v of %d gradients: the first unit's must go out during the backward", rec.atRS, rec.grads)
	}
}

// zero.New with the device backend refuses what the backend cannot do, naming the option
// and the backend: an optimizer other than Adam/AdamW on the device, disk offload, DiskMaster,
// an offload directory, a group without device collectives, a backend without a device or
// given to a second engine, no optimizer; and nil inputs or a rank outside the world.
func TestNewRefuses(t *testing.T) {
	cudatest.Require(t)
	ctx := context.Background()
	dev, g := oneRank(t)
	m, err := nn.NewGraphModel(gormlp.Fixed(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	used := devzero.NewBackend(dev)
	if e, err := zero.New(ctx, m, g, adamOpts(zero.WithBackend(used))...); err != nil {
		t.Fatal(err)
	} else {
		defer e.Close()
	}
	host := comm.NewLocalGroups(1)[0]
	defer host.Close(ctx)
	sgd := zero.WithOptimizer(zero.Optim(func(segs []optim.Segment) (optim.Optimizer, error) { return optim.NewSGD(segs, 0.1) }))
	for _, c := range []struct {
		name string
		be   *devzero.Backend
		coll comm.Group
		m    *nn.Model
		opts []zero.Option
		want string
	}{
		{"sgd on the device", devzero.NewBackend(dev), g, m, []zero.Option{sgd}, "optimizer *optim.SGD is not supported on the device"},
		{"disk offload", devzero.NewBackend(dev), g, m, adamOpts(zero.WithOffload(zero.OffloadDisk, 0), zero.WithOffloadDir(t.TempDir())), "zero.WithOffload(zero.OffloadDisk, ...) is not supported by the device backend (cuda/devzero)"},
		{"disk master", devzero.NewBackend(dev), g, m, adamOpts(zero.DiskMaster()), "zero.DiskMaster is not supported by the device backend"},
		{"offload dir", devzero.NewBackend(dev), g, m, adamOpts(zero.WithOffloadDir(t.TempDir())), ") is not supported by the device backend (cuda/devzero) (it keeps nothing on disk)"},
		{"host group", devzero.NewBackend(dev), host, m, adamOpts(), "the device backend (cuda/devzero): the group"},
		{"no device", devzero.NewBackend(nil), g, m, adamOpts(), "the device backend (cuda/devzero): no device"},
		{"second engine", used, g, m, adamOpts(), "already given to an engine"},
		{"no optimizer", devzero.NewBackend(dev), g, m, nil, "no optimizer: give WithOptimizer"},
		{"nil model", devzero.NewBackend(dev), g, nil, adamOpts(), "nil model"},
		{"rank outside", devzero.NewBackend(dev), &fakeRanks{rank: 2, size: 2}, m, adamOpts(), "rank 2 outside world size 2"},
	} {
		e, err := zero.New(ctx, c.m, c.coll, append([]zero.Option{zero.WithBackend(c.be)}, c.opts...)...)
		if err == nil {
			e.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// fakeRanks is a Collectives that is never asked to move anything.
type fakeRanks struct {
	devzero.Collectives
	rank, size int
}

func (f *fakeRanks) Rank() int { return f.rank }
func (f *fakeRanks) Size() int { return f.size }

// After Close a device engine and its programs refuse work with zero.ErrClosed (ZeroGrad has
// nothing to clear and returns nil), as the host engine's do, without touching the freed
// device memory.
func TestClosedEngine(t *testing.T) {
	cudatest.Require(t)
	ctx := context.Background()
	dev, g := oneRank(t)
	build := gormlp.Fixed(1, 2)
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	e, _, err := newEngine(ctx, dev, m, g, adamOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Compile(build)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Run", func() error { return p.Run(ctx) }},
		{"RunStep", func() error { return p.RunStep(ctx) }},
		{"Step", func() error { return p.Step(ctx) }},
		{"GatherParams", func() error { _, err := e.GatherParams(ctx); return err }},
		{"Save", func() error { return e.Save(ctx, t.TempDir(), "x") }},
		{"Load", func() error { return e.Load(t.TempDir()) }},
		{"Compile", func() error { _, err := e.Compile(build); return err }},
	} {
		if err := c.call(); !errors.Is(err, zero.ErrClosed) {
			t.Errorf("%s after Close: %v, want zero.ErrClosed", c.name, err)
		}
	}
	if err := e.ZeroGrad(); err != nil {
		t.Errorf("ZeroGrad after Close: %v, want nil", err)
	}
}
