package devzero_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The fake libcuda, cuBLAS, NCCL (ranks of one process meet in it) and the CPU emulator of
// kernels.cu: device results are computed.
// With workerVar set the binary is a rank of TestKilledAndResumedBitIdentical instead.
func TestMain(m *testing.M) {
	if os.Getenv(workerVar) != "" {
		proctest.Main(m, workerVar, worker)
	}
	os.Exit(cudatest.MainEmulated(m))
}

var _ train.Overlapped = (*zero.Program)(nil)

// newEngine is zero.New with the device backend on dev: the engine and its backend.
func newEngine(ctx context.Context, dev *cuda.Device, m *nn.Model, g comm.Group, opts ...zero.Option) (*zero.Engine, *devzero.Backend, error) {
	be := devzero.NewBackend(dev)
	e, err := zero.New(ctx, m, g, append([]zero.Option{zero.WithBackend(be)}, opts...)...)
	return e, be, err
}

// tol bounds the difference between device ZeRO-3 over 2 ranks and one CPU process on the
// global batch, relative to each tensor's scale: the device's GEMMs and reductions sum in
// other orders than gorgonia's CPU kernels (a few ulps), and the global batch's mean is two
// half-batch means averaged by the reduce-scatter instead of one sum, as cuda/devddp's
// tolerance says (the measured values are logged: under 2e-7). A unit gathered from the
// wrong shard or a shard stepped twice moves parameters by about AdamW's lr = 1e-2; a
// gradient divided by 3 instead of 2 is off by 0.5 in the gradient check (checked by hand).
const tol = 1e-5

const world, global, steps = 2, 8, 4

type model struct {
	name  string
	build func(n int) nn.BuildFunc
	opts  []zero.Option
}

var models = []model{
	// w1 (64) and w2 (16): two units, no padding at world 2.
	{"mlp", func(n int) nn.BuildFunc { return gormlp.Fixed(1, n) }, nil},
	// w3 (3) and w2, w1 (15 + 20) in a unit of two parameters: odd units, padded (each
	// gathered into a block of its padded size, the padding never read by the tape).
	{"odd", chain, []zero.Option{zero.WithUnitKey(func(name string) string {
		if name == "w3" {
			return "head"
		}
		return "body"
	})}},
}

// chain is relu(relu(x·w1)·w2)·w3 against y with a squared error, x [n,4], y [n,1].
func chain(n int) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("x", n, gormlp.In)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("y", n, gormlp.Out)
		if err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewSource(7))
		var ws []*G.Node
		for i, s := range [][2]int{{gormlp.In, 5}, {5, 3}, {3, gormlp.Out}} {
			v := make([]float32, s[0]*s[1])
			for j := range v {
				v[j] = float32(rng.NormFloat64()) * 0.5
			}
			w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(s[0], s[1]), G.WithName(fmt.Sprintf("w%d", i+1)),
				G.WithValue(tensor.New(tensor.WithShape(s[0], s[1]), tensor.WithBacking(v))))
			u, err := b.Learnable(w)
			if err != nil {
				return nil, err
			}
			ws = append(ws, u)
		}
		h := G.Must(G.Rectify(G.Must(G.Mul(x, ws[0]))))
		h = G.Must(G.Rectify(G.Must(G.Mul(h, ws[1]))))
		d := G.Must(G.Sub(G.Must(G.Mul(h, ws[2])), y))
		return G.Mean(G.Must(G.Square(d)))
	}
}

// Device ZeRO-3 on 2 in-process ranks (each its own cuda.Device and NCCL group over the
// fake NCCL) trained 4 steps of AdamW (weight decay 0.01) equals one CPU process (nn.Compile,
// optim.AdamW) on the global batch, for the perceptron and a model of odd-sized units, with
// the optimizer on the device and offloaded to the CPU: every step's loss (the ranks' mean)
// and the parameters after (gathered by GatherParams on both ranks, which must agree), and
// the first step's gradient shards put together (AdamW hides a gradient's scale; this
// does not). Step 0 is Run then Step, steps 1-3 RunStep (each unit's shard stepped on the
// device after its reduction).
// The memory held is what ZeRO-3 on the device promises: shards of ⌈L/N⌉ per unit for the
// parameters, the gradients and (on the device, or on the host under offload) the two
// AdamW moments; between Runs no gathered or gradient block is left, and during one at most
// two units' of each were held.
func TestTwoRanksMatchCPU(t *testing.T) {
	cudatest.Require(t)
	for _, md := range models {
		wantLoss, wantParams, wantGrad := cpuRun(t, md)
		for _, offload := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/offload=%v", md.name, offload), func(t *testing.T) {
				gotLoss, gotParams, gotGrad, mem, units := deviceRun(t, md, offload)
				if g := testnet.MaxRel(gotGrad, wantGrad); g > tol {
					t.Fatalf("the first step's gradient shards, put together, differ from the CPU's gradient by %.3g (tolerance %g)\ndevice %v\ncpu    %v", g, tol, gotGrad, wantGrad)
				}
				if fmt.Sprint(gotParams[1]) != fmt.Sprint(gotParams[0]) {
					t.Fatalf("rank 1's parameters differ from rank 0's:\n%v\n%v", gotParams[1], gotParams[0])
				}
				var worstLoss float64
				for s := range steps {
					mean := (gotLoss[0][s] + gotLoss[1][s]) / 2
					worstLoss = math.Max(worstLoss, math.Abs(float64(mean-wantLoss[s]))/math.Abs(float64(wantLoss[s])))
				}
				w := testnet.MaxRel(gotParams[0], wantParams)
				t.Logf("units %v, %d steps: losses within %.3g, parameters within %.3g of one CPU process (tolerance %g); memory %+v", units, steps, worstLoss, w, tol, mem)
				if worstLoss > tol || w > tol {
					t.Fatalf("device ZeRO-3 differs from the CPU: losses %.3g, parameters %.3g (tolerance %g)\ndevice %v\ncpu    %v", worstLoss, w, tol, gotParams[0], wantParams)
				}
				checkMemory(t, mem, units, len(wantParams), offload)
			})
		}
	}
}

func checkMemory(t *testing.T, mem devzero.Memory, units [][2]int, total int, offload bool) {
	t.Helper()
	shard, largest := 0, [2]int{}
	for _, u := range units {
		n := u[1] - u[0]
		shard += (n + world - 1) / world
		p := 4 * (n + world - 1) / world * world
		if p > largest[0] {
			largest[0], largest[1] = p, largest[0]
		} else if p > largest[1] {
			largest[1] = p
		}
	}
	if len(units) < 2 {
		t.Errorf("%d units, want several", len(units))
	}
	if shard > total/world+len(units) {
		t.Errorf("shard of %d floats, more than Ψ/N + one per unit = %d", shard, total/world+len(units))
	}
	want := devzero.Memory{ShardParams: 4 * shard, ShardGrads: 4 * shard, PeakGathered: mem.PeakGathered, PeakGradBlocks: mem.PeakGradBlocks}
	if offload {
		want.OptimizerHost = 4 * 4 * shard // master, gradient, exp_avg, exp_avg_sq
	} else {
		want.OptimizerDevice = 2 * 4 * shard
	}
	if mem != want {
		t.Errorf("memory %+v, want %+v", mem, want)
	}
	// Gathered blocks: the unit in use and the one prefetched, at most.
	if mem.PeakGathered <= 0 || mem.PeakGathered > largest[0]+largest[1] {
		t.Errorf("peak of gathered parameters %d B, want in (0, %d] (the two largest units)", mem.PeakGathered, largest[0]+largest[1])
	}
	if mem.PeakGradBlocks <= 0 || mem.PeakGradBlocks > largest[0]+largest[1] {
		t.Errorf("peak of gradient blocks %d B, want in (0, %d] (the two largest units)", mem.PeakGradBlocks, largest[0]+largest[1])
	}
}

func cpuRun(t *testing.T, md model) ([]float32, []float32, []float32) {
	ctx := context.Background()
	build := md.build(global)
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	p, err := nn.Compile(m, build, nn.WithOptimizer(adamW(t, m)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x, y := make([]float32, global*gormlp.In), make([]float32, global*gormlp.Out)
	var losses, grad0 []float32
	for s := range steps {
		gormlp.Data(x, y, s*global, global)
		if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if s == 0 {
			grad0 = append([]float32(nil), m.Params.Grad...)
		}
		if err := p.Step(ctx); err != nil {
			t.Fatal(err)
		}
		l, _ := p.LossValue()
		losses = append(losses, l)
	}
	return losses, append([]float32(nil), m.Params.Data...), grad0
}

// adamOpts are the engine options of the device runs: the CPU reference's AdamW (lr 0.01,
// weight decay 0.01), then extra.
func adamOpts(extra ...zero.Option) []zero.Option {
	return append([]zero.Option{zero.WithOptimizer(zero.AdamW(0.01)), zero.WithWeightDecay(0.01)}, extra...)
}

func adamW(t *testing.T, m *nn.Model) optim.Optimizer {
	segs, err := optim.Segments(m.Params, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	o, err := optim.NewAdamW(segs, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// deviceRun trains on world in-process ranks and returns each rank's losses and final
// parameters, rank 0's memory and units ([lo, hi) each).
func deviceRun(t *testing.T, md model, offload bool) ([][]float32, [][]float32, []float32, devzero.Memory, [][2]int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := store.Listen("127.0.0.1:0", world)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// Devices are opened one after the other: the fake driver loads the kernel emulator at
	// the first lookup of a pending kernel, without a lock.
	devs := make([]*cuda.Device, world)
	for r := range devs {
		if devs[r], err = cuda.Open(0); err != nil {
			t.Fatal(err)
		}
		defer devs[r].Close()
	}
	losses, params, globals := make([][]float32, world), make([][]float32, world), make([]float32, world)
	var grad0 []float32 // the first step's gradient, from the ranks' shards
	var mu sync.Mutex
	var mem devzero.Memory
	var units [][2]int
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				store, err := store.Dial(ctx, srv.Addr())
				if err != nil {
					return err
				}
				defer store.Close()
				g, err := nccl.New(ctx, store, r, world, nccl.WithDevice(0))
				if err != nil {
					return err
				}
				defer g.Close(context.Background())
				n := global / world
				build := md.build(n)
				m, err := nn.NewGraphModel(build)
				if err != nil {
					return err
				}
				opts := md.opts
				if offload {
					opts = append(opts[:len(opts):len(opts)], zero.WithOffload(zero.OffloadCPU, 0))
				}
				e, be, err := newEngine(ctx, devs[r], m, g, adamOpts(opts...)...)
				if err != nil {
					return err
				}
				defer e.Close()
				p, err := e.Compile(build)
				if err != nil {
					return err
				}
				defer p.Close()
				x, y := make([]float32, n*gormlp.In), make([]float32, n*gormlp.Out)
				for s := range steps {
					gormlp.Data(x, y, s*global+r*n, n)
					if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
						return err
					}
					if s > 0 {
						// RunStep: each unit stepped after its reduction (Run then Step under offload).
						if err := train.RunStep(ctx, p); err != nil {
							return fmt.Errorf("step %d: %w", s, err)
						}
					} else if err := p.Run(ctx); err != nil {
						return fmt.Errorf("step %d: %w", s, err)
					}
					if s == 0 {
						sh, err := e.ShardGrad(ctx)
						if err != nil {
							return err
						}
						mu.Lock()
						if grad0 == nil {
							grad0 = make([]float32, len(m.Params.Grad))
						}
						for _, u := range e.Units() {
							lo := u.Lo + r*u.Shard
							hi := min(lo+u.Shard, u.Hi)
							if lo < hi {
								copy(grad0[lo:hi], sh[u.ShardBase:])
							}
						}
						mu.Unlock()
						if err := p.Step(ctx); err != nil {
							return fmt.Errorf("step %d: %w", s, err)
						}
					}
					l, err := p.LossValue()
					if err != nil {
						return err
					}
					losses[r] = append(losses[r], l)
				}
				// The engine's Program on the device: GlobalLoss is the mean of the ranks'
				// last losses, and Units lists every unit once, in forward order.
				if globals[r], err = p.GlobalLoss(ctx); err != nil {
					return err
				}
				seen := map[*zero.Unit]bool{}
				for _, u := range p.Units() {
					seen[u] = true
				}
				if len(seen) != len(e.Units()) || len(p.Units()) != len(e.Units()) {
					return fmt.Errorf("the program gathers %d units (%d distinct), want the engine's %d", len(p.Units()), len(seen), len(e.Units()))
				}
				if params[r], err = e.GatherParams(ctx); err != nil {
					return err
				}
				if r == 0 {
					mem = be.Memory()
					// The engine's account (the trainer's report) is the backend's bytes.
					zm := e.Memory()
					if want := int64(mem.ShardParams + mem.ShardGrads + mem.OptimizerDevice + mem.OptimizerHost); zm.ModelStateBytes() != want || zm.Psi != len(m.Params.Data) || zm.World != world {
						return fmt.Errorf("engine memory %v, want model state %d B, Ψ=%d, N=%d", zm, want, len(m.Params.Data), world)
					}
					for _, u := range e.Units() {
						units = append(units, [2]int{u.Lo, u.Hi})
					}
				}
				return nil
			}()
			if errs[r] != nil {
				cancel() // the other rank must not wait for this one
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var sum float32
	for r := range world {
		sum += losses[r][steps-1]
	}
	for r, gl := range globals {
		if want := sum / world; gl != want {
			t.Errorf("rank %d: GlobalLoss %v, want the ranks' mean %v", r, gl, want)
		}
	}
	return losses, params, grad0, mem, units
}

// oneRank opens device 0 and a world-1 NCCL group on it, over a store of its own; all of it
// is closed when t ends.
func oneRank(t *testing.T) (*cuda.Device, *nccl.Group) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv, err := store.Listen("127.0.0.1:0", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	store, err := store.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	dev, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	g, err := nccl.New(ctx, store, 0, 1, nccl.WithDevice(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	return dev, g
}
