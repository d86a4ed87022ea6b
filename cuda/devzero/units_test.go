package devzero_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/devzero"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

const deepLayers, deepWidth, deepBatch = 12, 64, 2

// deep is tanh(…tanh(x·l0.w)…·l11.w) against y with a squared error: twelve 64×64
// weights, one unit each (zero.DepthKey(1)), x and y [2,64].
func deep(b *nn.Builder) (*G.Node, error) {
	x, err := b.Input("x", deepBatch, deepWidth)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("y", deepBatch, deepWidth)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewSource(3))
	h := x
	for i := range deepLayers {
		v := make([]float32, deepWidth*deepWidth)
		for j := range v {
			v[j] = float32(rng.NormFloat64()) * 0.15
		}
		w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(deepWidth, deepWidth), G.WithName(fmt.Sprintf("l%d.w", i)),
			G.WithValue(tensor.New(tensor.WithShape(deepWidth, deepWidth), tensor.WithBacking(v))))
		u, err := b.Learnable(w)
		if err != nil {
			return nil, err
		}
		h = G.Must(G.Tanh(G.Must(G.Mul(h, u))))
	}
	return G.Mean(G.Must(G.Square(G.Must(G.Sub(h, y)))))
}

// logGroup is an NCCL group that appends "gather" to the test's log at every all-gather
// issued (the engine's trace appends its need and done events to the same log).
type logGroup struct {
	*nccl.Group
	mu  sync.Mutex
	log *[]string
}

func (l *logGroup) AllGatherDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, wait, done driver.Event) nccl.DeviceWork {
	l.mu.Lock()
	*l.log = append(*l.log, "gather")
	l.mu.Unlock()
	return l.Group.AllGatherDeviceAfter(dst, src, count, dt, wait, done)
}

// One Run of the twelve-unit model on one rank, at prefetch depths 0, 1 and 2:
//   - prefetch: when the tape needs the k-th unit of the forward (right before its first
//     kernel), exactly k+1+depth all-gathers have been issued (the NCCL group's own log):
//     the k-th unit's and the depth units' after it, not every unit, and not only its own;
//   - memory: the gathered parameter blocks held at once are at most 1+depth units (the
//     engine's count), and the device's caching allocator's peak over the whole test
//     exceeds the persistent sharded state (parameter and gradient shards, AdamW moments)
//     by less than one full copy of the parameters (4Ψ bytes): what is over is the units
//     in use, their gradients, the activations and the inputs; the former design held two
//     full copies (8Ψ bytes) beside the shards for the program's life;
//   - the loss and the gradient shard are equal bit for bit at every depth.
func TestGatherAheadAndFree(t *testing.T) {
	cudatest.Require(t)
	var losses []float32
	var grads [][]float32
	for _, depth := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("prefetch%d", depth), func(t *testing.T) {
			loss, grad := runDeep(t, depth)
			losses, grads = append(losses, loss), append(grads, grad)
		})
	}
	for i := 1; i < len(losses); i++ {
		if losses[i] != losses[0] || !slices.Equal(grads[i], grads[0]) {
			t.Errorf("prefetch %d: loss %v, want %v (prefetch 0) and the same gradient shard bit for bit", i, losses[i], losses[0])
		}
	}
}

func runDeep(t *testing.T, depth int) (float32, []float32) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, g := oneRank(t)
	var log []string
	lg := &logGroup{Group: g, log: &log}
	trace := func(ev devzero.TraceEvent) {
		if ev.Kind == "need" || ev.Kind == "done" {
			lg.mu.Lock()
			log = append(log, fmt.Sprintf("%s %d %s", ev.Kind, ev.Unit, ev.Phase))
			lg.mu.Unlock()
		}
	}
	m, err := nn.NewGraphModel(deep)
	if err != nil {
		t.Fatal(err)
	}
	e, be, err := newEngine(ctx, dev, m, lg, adamOpts(zero.WithPrefetch(depth))...)
	if err != nil {
		t.Fatal(err)
	}
	be.SetTrace(trace)
	defer e.Close()
	units := e.Units()
	if len(units) != deepLayers {
		t.Fatalf("%d units, want %d", len(units), deepLayers)
	}
	p, err := e.Compile(deep)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x, y := make([]float32, deepBatch*deepWidth), make([]float32, deepBatch*deepWidth)
	rng := rand.New(rand.NewSource(5))
	for i := range x {
		x[i], y[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())*0.5
	}
	if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
		t.Fatal(err)
	}
	before := dev.MemoryStats()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	after := dev.MemoryStats()
	gathers := 0
	k := 0
	seen := map[int]bool{}
	for _, l := range log {
		if l == "gather" {
			gathers++
			continue
		}
		var kind, ph string
		var u int
		if _, err := fmt.Sscanf(l, "%s %d %s", &kind, &u, &ph); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if kind != "need" || ph != tape.Forward.String() {
			continue
		}
		if seen[u] {
			t.Fatalf("unit %d needed twice in forward (log %v)", u, log)
		}
		seen[u] = true
		if k+depth <= deepLayers-1 && gathers != k+1+depth {
			t.Errorf("at the forward need %d (unit %d), %d all-gathers issued, want %d (log %v)", k, u, gathers, k+1+depth, log)
		}
		k++
	}
	if k != deepLayers {
		t.Errorf("%d forward needs, want %d (log %v)", k, deepLayers, log)
	}
	unit := 4 * units[0].Padded
	psi := 4 * len(m.Params.Data)
	mem := be.Memory()
	extra := after.PeakInUse - int64(mem.ShardParams+mem.ShardGrads+mem.OptimizerDevice)
	t.Logf("prefetch %d: %d all-gathers; gathered peak %d B, gradient blocks peak %d B (unit %d B, Ψ %d B); device peak %d B over the sharded state (%d B in use before the Run)",
		depth, gathers, mem.PeakGathered, mem.PeakGradBlocks, unit, psi, extra, before.InUse)
	if mem.Gathered != 0 || mem.GradBlocks != 0 {
		t.Errorf("after the Run %d B gathered and %d B of gradient blocks held, want none", mem.Gathered, mem.GradBlocks)
	}
	if mem.PeakGathered <= 0 || mem.PeakGathered > (1+depth)*unit {
		t.Errorf("gathered peak %d B, want in (0, %d] (%d units)", mem.PeakGathered, (1+depth)*unit, 1+depth)
	}
	if extra >= int64(psi) {
		t.Errorf("the device's peak is %d B over the sharded state, want under one copy of the parameters (%d B)", extra, psi)
	}
	loss, err := p.LossValue()
	if err != nil {
		t.Fatal(err)
	}
	grad, err := e.ShardGrad(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return loss, grad
}

// failGroup is an NCCL group whose n-th all-gather (from 1) fails before it is issued.
type failGroup struct {
	*nccl.Group
	n, calls int
}

func (f *failGroup) AllGatherDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, wait, done driver.Event) nccl.DeviceWork {
	if f.calls++; f.calls == f.n {
		return brokenWork{}
	}
	return f.Group.AllGatherDeviceAfter(dst, src, count, dt, wait, done)
}

// brokenWork is an all-gather that failed: enqueued and done at once, with an error.
type brokenWork struct{}

var errBroken = errors.New("fake NCCL: all-gather refused")

func (brokenWork) Done() <-chan struct{}      { return closed }
func (brokenWork) Enqueued() <-chan struct{}  { return closed }
func (brokenWork) Wait(context.Context) error { return errBroken }

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// A Run whose third all-gather fails returns that error (errors.Is), naming the unit, and
// leaves no gathered or gradient block behind; the next Run, whose gathers succeed,
// computes the loss a fresh engine computes.
func TestGatherFailureFreesBlocks(t *testing.T) {
	cudatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, g := oneRank(t)
	x, y := make([]float32, deepBatch*deepWidth), make([]float32, deepBatch*deepWidth)
	for i := range x {
		x[i], y[i] = float32(i%7)*0.1, float32(i%5)*0.1
	}
	var losses []float32
	for _, fail := range []int{3, 0} {
		m, err := nn.NewGraphModel(deep)
		if err != nil {
			t.Fatal(err)
		}
		e, be, err := newEngine(ctx, dev, m, &failGroup{Group: g, n: fail}, adamOpts()...)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		p, err := e.Compile(deep)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
			t.Fatal(err)
		}
		if fail > 0 {
			err := p.Run(ctx)
			if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), "all-gather of unit l") {
				t.Fatalf("Run with a failing all-gather: %v, want the fake's error naming the unit", err)
			}
			t.Logf("failed Run: %v", err)
			if mem := be.Memory(); mem.Gathered != 0 || mem.GradBlocks != 0 {
				t.Errorf("after the failed Run %d B gathered and %d B of gradient blocks held, want none", mem.Gathered, mem.GradBlocks)
			}
			p.ZeroGrad()
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := p.LossValue()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	if losses[0] != losses[1] {
		t.Errorf("loss after a failed Run %v, want %v (a fresh engine's)", losses[0], losses[1])
	}
}
