package devzero_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
)

// rankEngine is what the checkpoint tests drive on the host and on the (emulated) device:
// zero.Engine, with devzero's backend on the device, built with the same zero options.
type rankEngine = *zero.Engine

// job is world in-process ranks of one engine kind, each with its model and program.
type job struct {
	world int
	per   int // samples per rank
	conv  bool
	ms    []*nn.Model
	es    []rankEngine
	ps    []train.Program
}

// convNet is testnet's convolutional net with BatchNorm (images and labels, testnet.Batch):
// model.build is not used for it.
var convNet = model{name: "convnet-bn"}

func (md model) newModel(per int) (*nn.Model, nn.BuildFunc, error) {
	if md.name == convNet.name {
		m, err := nn.NewModel(testnet.ConvNet(true), nn.WithSeed(1))
		return m, testnet.Classify(per), err
	}
	build := md.build(per)
	m, err := nn.NewGraphModel(build)
	return m, build, err
}

func newJob(md model, world int) *job {
	return &job{world: world, per: global / world, conv: md.name == convNet.name, ms: make([]*nn.Model, world),
		es: make([]rankEngine, world), ps: make([]train.Program, world)}
}

// onRanks runs f on every rank concurrently and joins the errors; a failing rank cancels
// ctx so that the others do not wait for it in a collective.
func onRanks(ctx context.Context, world int, f func(ctx context.Context, r int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = f(ctx, r); errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deviceJob starts world device ranks (a cuda.Device and an NCCL group each, over the fake
// NCCL) of md with opts; everything is closed when t ends.
func deviceJob(t *testing.T, md model, world int, opts ...zero.Option) *job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := store.Listen("127.0.0.1:0", world)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	devs := make([]*cuda.Device, world)
	for r := range devs { // one after the other: see deviceRun
		if devs[r], err = cuda.Open(0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[r].Close() })
	}
	return startJob(t, ctx, md, world, opts, func(ctx context.Context, r int, m *nn.Model, opts []zero.Option) (rankEngine, func(), error) {
		store, err := store.Dial(ctx, srv.Addr())
		if err != nil {
			return nil, nil, err
		}
		g, err := nccl.New(ctx, store, r, world, nccl.WithDevice(0))
		if err != nil {
			store.Close()
			return nil, nil, err
		}
		e, _, err := newEngine(ctx, devs[r], m, g, opts...)
		if err != nil {
			g.Close(context.Background())
			store.Close()
			return nil, nil, err
		}
		return e, func() { e.Close(); g.Close(context.Background()); store.Close() }, nil
	})
}

// startJob builds world ranks of md: engine makes rank r's engine over its model with the
// zero options (adamOpts, md's, then opts) and returns what closes it when t ends.
func startJob(t *testing.T, ctx context.Context, md model, world int, opts []zero.Option, engine func(ctx context.Context, r int, m *nn.Model, opts []zero.Option) (rankEngine, func(), error)) *job {
	t.Helper()
	j := newJob(md, world)
	var mu sync.Mutex
	err := onRanks(ctx, world, func(ctx context.Context, r int) error {
		m, build, err := md.newModel(j.per)
		if err != nil {
			return err
		}
		e, closeEngine, err := engine(ctx, r, m, adamOpts(append(md.opts[:len(md.opts):len(md.opts)], opts...)...))
		if err != nil {
			return err
		}
		p, err := e.Compile(build)
		mu.Lock()
		t.Cleanup(func() {
			if p != nil {
				p.Close()
			}
			closeEngine()
		})
		mu.Unlock()
		j.ms[r], j.es[r], j.ps[r] = m, e, p
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// hostJob starts world host ranks (zero.New over in-process groups) of md with opts.
func hostJob(t *testing.T, md model, world int, opts ...zero.Option) *job {
	t.Helper()
	groups := comm.NewLocalGroups(world)
	return startJob(t, context.Background(), md, world, opts, func(ctx context.Context, r int, m *nn.Model, opts []zero.Option) (rankEngine, func(), error) {
		e, err := zero.New(ctx, m, groups[r], opts...)
		if err != nil {
			groups[r].Close(context.Background())
			return nil, nil, err
		}
		return e, func() { e.Close(); groups[r].Close(context.Background()) }, nil
	})
}

// steps trains steps [from, to) of the global batch split over the ranks and returns rank
// 0's losses.
func (j *job) steps(t *testing.T, from, to int) []float32 {
	t.Helper()
	var losses []float32
	err := onRanks(context.Background(), j.world, func(ctx context.Context, r int) error {
		x, y := make([]float32, j.per*gormlp.In), make([]float32, j.per*gormlp.Out)
		p := j.ps[r]
		for s := from; s < to; s++ {
			in := [2]string{"x", "y"}
			if j.conv {
				x, y = testnet.Batch(s, 0, r*j.per, (r+1)*j.per)
				in = [2]string{"images", "labels"}
			} else {
				gormlp.Data(x, y, s*global+r*j.per, j.per)
			}
			if err := errors.Join(p.ZeroGrad(), p.SetInput(in[0], x), p.SetInput(in[1], y)); err != nil {
				return err
			}
			if err := train.RunStep(ctx, p); err != nil {
				return fmt.Errorf("step %d: %w", s, err)
			}
			l, err := p.LossValue()
			if err != nil {
				return err
			}
			if r == 0 {
				losses = append(losses, l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return losses
}

func (j *job) save(t *testing.T, dir, tag string) {
	t.Helper()
	if err := onRanks(context.Background(), j.world, func(ctx context.Context, r int) error { return j.es[r].Save(ctx, dir, tag) }); err != nil {
		t.Fatal(err)
	}
}

func (j *job) load(t *testing.T, path string) {
	t.Helper()
	if err := onRanks(context.Background(), j.world, func(_ context.Context, r int) error { return j.es[r].Load(path) }); err != nil {
		t.Fatal(err)
	}
}

// params are the gathered parameters (every rank's, which must agree bit for bit).
func (j *job) params(t *testing.T) []float32 {
	t.Helper()
	out := make([][]float32, j.world)
	if err := onRanks(context.Background(), j.world, func(ctx context.Context, r int) error {
		var err error
		out[r], err = j.es[r].GatherParams(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for r := 1; r < j.world; r++ {
		if d := bitDiff(out[r], out[0]); d >= 0 {
			t.Fatalf("rank %d's gathered parameters differ from rank 0's at element %d", r, d)
		}
	}
	return out[0]
}

// bitDiff is the first index where a and b differ bit for bit, or -1.
func bitDiff(a, b []float32) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// consolidated is the checkpoint in dir merged into whole tensors (zero.Consolidate with
// the optimizer state) by name, with the manifest's step count.
func consolidated(t *testing.T, dir string) (map[string]nn.StateEntry, int64) {
	t.Helper()
	es, m, err := zero.Consolidate(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]nn.StateEntry{}
	for _, e := range es {
		out[e.Name] = e
	}
	return out, m.Steps
}

// sameCheckpoint fails unless the checkpoints in dirs a and b hold the same tensors, bit
// for bit (parameters, optimizer moments, step, learning rate, buffers), whatever world
// sizes and engines wrote them.
func sameCheckpoint(t *testing.T, what, a, b string) {
	t.Helper()
	ea, sa := consolidated(t, a)
	eb, sb := consolidated(t, b)
	if sa != sb || len(ea) != len(eb) {
		t.Fatalf("%s: %d tensors at step %d against %d at step %d", what, len(ea), sa, len(eb), sb)
	}
	names := make([]string, 0, len(ea))
	for n := range ea {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		x, y := ea[n], eb[n]
		if d := bitDiff(x.F32, y.F32); d >= 0 || fmt.Sprint(x.I64, x.F64) != fmt.Sprint(y.I64, y.F64) {
			t.Fatalf("%s: tensor %s differs (float32 element %d; %v %v against %v %v)", what, n, d, x.I64, x.F64, y.I64, y.F64)
		}
	}
	t.Logf("%s: %d tensors at step %d equal bit for bit", what, len(names), sa)
}

// Device ZeRO-3 (world 2, the model of padded units, AdamW on the device and offloaded)
// saves after step 3 of 6 in parallel/zero's format; fresh engines loading it and training
// steps 3-5 end bit-identical to the uninterrupted run: the losses of every resumed step,
// the gathered parameters and the final checkpoint (moments, step count, learning rate).
func TestSaveResumeBitIdentical(t *testing.T) {
	cudatest.Require(t)
	for _, offload := range []bool{false, true} {
		t.Run(fmt.Sprintf("offload=%v", offload), func(t *testing.T) {
			var opts []zero.Option
			if offload {
				opts = append(opts, zero.WithOffload(zero.OffloadCPU, 0))
			}
			dir, dirB := t.TempDir(), t.TempDir()
			a := deviceJob(t, models[1], world, opts...)
			a.steps(t, 0, 3)
			a.save(t, dir, "step3")
			wantLoss := a.steps(t, 3, 6)
			want := a.params(t)
			a.save(t, dir, "step6")

			b := deviceJob(t, models[1], world, opts...)
			b.load(t, filepath.Join(dir, "step3"))
			gotLoss := b.steps(t, 3, 6)
			if fmt.Sprint(gotLoss) != fmt.Sprint(wantLoss) {
				t.Fatalf("resumed losses %v, uninterrupted %v", gotLoss, wantLoss)
			}
			if d := bitDiff(b.params(t), want); d >= 0 {
				t.Fatalf("resumed parameters differ from the uninterrupted run's at element %d", d)
			}
			b.save(t, dirB, "step6")
			sameCheckpoint(t, "resumed against uninterrupted, step 6", filepath.Join(dir, "step6"), filepath.Join(dirB, "step6"))
		})
	}
}

// One checkpoint format: a host ZeRO-3 checkpoint (zero.New, world 2, after 3 steps) loads
// into device ZeRO-3 at world 2 and, resharded, at world 1, and the device engines save it
// again unchanged bit for bit (every parameter, moment, the step count, learning rate); the
// device's checkpoint after a further step loads back into the host at world 3 and saves
// unchanged. The step after the move equals the host's own next step within tol (the
// device's GEMMs sum in other orders than gorgonia's).
func TestCheckpointMovesBetweenHostAndDevice(t *testing.T) {
	cudatest.Require(t)
	md := models[1]
	hostDir, devDir, backDir := t.TempDir(), t.TempDir(), t.TempDir()
	h := hostJob(t, md, 2)
	h.steps(t, 0, 3)
	h.save(t, hostDir, "step3")
	h.steps(t, 3, 4)
	hostNext := h.params(t)

	for _, w := range []int{2, 1} {
		d := deviceJob(t, md, w)
		d.load(t, hostDir)
		tag := fmt.Sprintf("world%d", w)
		d.save(t, devDir, tag)
		sameCheckpoint(t, fmt.Sprintf("host world 2 -> device world %d", w), filepath.Join(hostDir, "step3"), filepath.Join(devDir, tag))
		if w != 2 {
			continue
		}
		d.steps(t, 3, 4)
		if r := testnet.MaxRel(d.params(t), hostNext); r > tol {
			t.Fatalf("the device's step after the host's checkpoint differs from the host's by %.3g (tolerance %g)", r, tol)
		} else {
			t.Logf("the step after the move: device within %.3g of the host", r)
		}
		d.save(t, devDir, "step4")
	}

	back := hostJob(t, md, 3)
	back.load(t, filepath.Join(devDir, "step4"))
	back.save(t, backDir, "step4")
	sameCheckpoint(t, "device world 2 -> host world 3", filepath.Join(devDir, "step4"), filepath.Join(backDir, "step4"))
}

// state is rank 0's gathered parameters followed by its model's float buffers (BatchNorm's
// running statistics).
func (j *job) state(t *testing.T) []float32 {
	out := j.params(t)
	for _, b := range j.ms[0].Params.Buffers {
		out = append(out, b.Data...)
	}
	return out
}

// Device ZeRO-3 with zero.SyncBatchNorm equals the host engine with it on testnet's
// BatchNorm convnet (2 ranks, 3 AdamW steps, the same zero options): the gathered parameters
// and the running statistics within tol, while the host without SyncBatchNorm is farther
// than tol (each rank's BatchNorm then sees its half batch); both engines' checkpoints hold
// the statistics. AdamW's eps is 1e-3 here: with the default 1e-8 its first step moves a
// parameter by ±lr whatever its gradient's size, and the weights before a BatchNorm have
// gradients near 0 whose sign the device's other summation order flips (measured: 0.02
// apart, with or without SyncBatchNorm).
func TestSyncBatchNormMatchesHost(t *testing.T) {
	cudatest.Require(t)
	adam := zero.WithOptimizer(zero.AdamW(0.01, optim.WithEps(1e-3)))
	syncBN := zero.SyncBatchNorm()
	h := hostJob(t, convNet, world, adam, syncBN)
	h.steps(t, 0, 3)
	want := h.state(t)
	plain := hostJob(t, convNet, world, adam)
	plain.steps(t, 0, 3)
	d := deviceJob(t, convNet, world, adam, syncBN)
	d.steps(t, 0, 3)
	got := d.state(t)
	w, far := testnet.MaxRel(got, want), testnet.MaxRel(plain.state(t), want)
	t.Logf("device SyncBatchNorm within %.3g of the host's (tolerance %g); the host without it %.3g away", w, tol, far)
	if w > tol {
		t.Fatalf("device ZeRO-3 with SyncBatchNorm differs from the host's by %.3g (tolerance %g)", w, tol)
	}
	if far <= tol {
		t.Fatalf("the host without SyncBatchNorm is within %.3g of the host with it: the test cannot tell them apart", far)
	}
	hd, dd := t.TempDir(), t.TempDir()
	h.save(t, hd, "step3")
	d.save(t, dd, "step3")
	he, _ := consolidated(t, hd)
	de, _ := consolidated(t, dd)
	for _, b := range d.ms[0].Params.Buffers {
		if len(b.Data) > 0 && testnet.MaxRel(de[b.Name].F32, he[b.Name].F32) > tol {
			t.Fatalf("buffer %s in the device's checkpoint differs from the host's by %.3g", b.Name, testnet.MaxRel(de[b.Name].F32, he[b.Name].F32))
		}
	}
}

// Under zero.OffloadCPU the device engine steps any optimizer of package optim on the CPU:
// SGD with momentum over the pinned master shard equals the host engine with the same zero
// options (the model of padded units, 2 ranks, 3 steps, parameters within tol), and the
// checkpoint holds its momentum buffers as the host's does (within tol).
func TestOffloadedSGDMatchesHost(t *testing.T) {
	cudatest.Require(t)
	opts := []zero.Option{zero.WithOffload(zero.OffloadCPU, 2), zero.WithOptimizer(zero.Optim(func(segs []optim.Segment) (optim.Optimizer, error) {
		return optim.NewSGD(segs, 0.05, optim.WithMomentum(0.9))
	}))}
	h := hostJob(t, models[1], world, opts...)
	h.steps(t, 0, 3)
	d := deviceJob(t, models[1], world, opts...)
	d.steps(t, 0, 3)
	w := testnet.MaxRel(d.params(t), h.params(t))
	t.Logf("offloaded SGD: device within %.3g of the host (tolerance %g)", w, tol)
	if w > tol {
		t.Fatalf("offloaded SGD on the device differs from the host by %.3g (tolerance %g)", w, tol)
	}
	hd, dd := t.TempDir(), t.TempDir()
	h.save(t, hd, "step3")
	d.save(t, dd, "step3")
	he, hs := consolidated(t, hd)
	de, ds := consolidated(t, dd)
	if hs != ds || hs != 3 {
		t.Fatalf("steps in the checkpoints: host %d, device %d; want 3", hs, ds)
	}
	n := 0
	for name, e := range he {
		if !strings.HasSuffix(name, ".momentum_buffer") {
			continue
		}
		n++
		if r := testnet.MaxRel(de[name].F32, e.F32); r > tol {
			t.Fatalf("%s: device %.3g from the host", name, r)
		}
	}
	if n == 0 {
		t.Fatal("no momentum buffer in the host's checkpoint")
	}
}

// The engine's periodic agreement check (zero.CheckEvery) runs on the device backend as on
// the host: a learning rate set on one rank only fails the next checked training run on
// every rank with zero.ErrDiverged, naming what differs.
func TestDivergedLearningRateFailsOnDevice(t *testing.T) {
	cudatest.Require(t)
	for _, runStep := range []bool{false, true} {
		j := deviceJob(t, models[0], world, zero.CheckEvery(1))
		j.steps(t, 0, 2)
		j.es[1].Optimizer().SetLR(j.es[1].Optimizer().LR() / 2)
		errs := make([]error, world)
		_ = onRanks(context.Background(), world, func(ctx context.Context, r int) error {
			x, y := make([]float32, j.per*gormlp.In), make([]float32, j.per*gormlp.Out)
			gormlp.Data(x, y, 2*global+r*j.per, j.per)
			p := j.ps[r]
			if errs[r] = errors.Join(p.SetInput("x", x), p.SetInput("y", y)); errs[r] == nil {
				if runStep {
					errs[r] = train.RunStep(ctx, p)
				} else {
					errs[r] = p.Run(ctx)
				}
			}
			// nil: the first rank to see the difference must not cancel the other's
			// exchange (onRanks cancels on an error), which sees it too.
			return nil
		})
		for r, err := range errs {
			want := "optimizer step count and learning rate differs between rank 0 and rank 1"
			if !errors.Is(err, zero.ErrDiverged) || !strings.Contains(err.Error(), want) {
				t.Errorf("RunStep %v, rank %d: %v, want zero.ErrDiverged naming %q", runStep, r, err, want)
			}
		}
	}
}
