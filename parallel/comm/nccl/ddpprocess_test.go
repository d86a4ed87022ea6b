package nccl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	G "gorgonia.org/gorgonia"
)

const ddpPer, ddpFeatures, ddpClasses, ddpSteps = 4, 6, 3, 3

func ddpBuild(b *nn.Builder) (*G.Node, error) {
	x, err := b.Input("x", ddpPer, ddpFeatures)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("y", ddpPer)
	if err != nil {
		return nil, err
	}
	logits, err := b.Forward(x)
	if err != nil {
		return nil, err
	}
	return ops.CrossEntropy(logits, y, 0)
}

// ddpTrain runs ddpSteps DDP steps of an MLP (SGD with momentum, the sharded GradScaler) as
// g's rank and returns the final parameters. Each rank starts from its own seed: DDP's
// broadcast must align them. graphMu serialises graph construction between in-process ranks
// (docs/DESIGN.md §1).
func ddpTrain(ctx context.Context, g comm.Group, graphMu *sync.Mutex) ([]float32, error) {
	r := g.Rank()
	mlp := &nn.Sequential{Names: []string{"fc1", "relu", "fc2"},
		Layers: []nn.Module{&nn.Linear{In: ddpFeatures, Out: 8}, &nn.ReLU{}, &nn.Linear{In: 8, Out: ddpClasses}}}
	m, err := nn.NewModel(mlp, nn.WithSeed(int64(1+r)))
	if err != nil {
		return nil, err
	}
	d, err := ddp.New(ctx, m, g)
	if err != nil {
		return nil, err
	}
	graphMu.Lock()
	p, err := d.Compile(ddpBuild)
	graphMu.Unlock()
	if err != nil {
		return nil, err
	}
	segs, err := optim.Segments(m.Params, 0)
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
	if err != nil {
		return nil, err
	}
	sc, err := amp.NewShardedScaler(g, amp.WithInitScale(1), amp.WithGradBuffer(m.Params.Grad))
	if err != nil {
		return nil, err
	}
	for step := range ddpSteps {
		rng := rand.New(rand.NewSource(int64(10*step + r)))
		x, y := make([]float32, ddpPer*ddpFeatures), make([]float32, ddpPer)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		for i := range y {
			y[i] = float32(rng.Intn(ddpClasses))
		}
		if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
			return nil, err
		}
		m.Params.ZeroGrad()
		if err := p.Run(ctx); err != nil {
			return nil, err
		}
		if _, err := sc.StepContext(ctx, opt); err != nil {
			return nil, err
		}
		if err := sc.UpdateContext(ctx); err != nil {
			return nil, err
		}
	}
	return append([]float32(nil), m.Params.Data...), nil
}

// procDDP is the "ddp" worker: it prints its final parameters as float32 bit patterns.
func procDDP(ctx context.Context, g *Group) error {
	params, err := ddpTrain(ctx, g, new(sync.Mutex))
	if err != nil {
		return fmt.Errorf("rank %d: %w", g.Rank(), err)
	}
	words := make([]string, len(params))
	for i, v := range params {
		words[i] = strconv.FormatUint(uint64(math.Float32bits(v)), 16)
	}
	fmt.Println("params", strings.Join(words, ","))
	return nil
}

// parseParams reads the line procDDP printed.
func parseParams(out string) ([]float32, error) {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "params ")
		if !ok {
			continue
		}
		var ps []float32
		for _, w := range strings.Split(rest, ",") {
			b, err := strconv.ParseUint(w, 16, 32)
			if err != nil {
				return nil, err
			}
			ps = append(ps, math.Float32frombits(uint32(b)))
		}
		return ps, nil
	}
	return nil, errors.New("no parameters printed")
}

// DDP and the sharded GradScaler over NCCL groups of two processes (each its own fake device,
// the fake NCCL's shared-memory clique between them) leave both ranks with identical
// parameters, equal to those of comm's in-process groups to float32 rounding of the
// reduction order (rel 1e-6, as TestDDPAndShardedScalerOnNCCL for in-process ranks; the
// measured difference is logged).
func TestProcessesDDP(t *testing.T) {
	job := spawnRanks(t, 2, "ddp")
	got := make([][]float32, 2)
	for r := range 2 {
		var err error
		if got[r], err = parseParams(job.Outputs[r]); job.Errs[r] != nil || err != nil {
			t.Fatalf("rank %d: %v %v\n%s", r, job.Errs[r], err, job.Outputs[r])
		}
	}
	local := comm.NewLocalGroups(2)
	defer func() {
		for _, g := range local {
			g.Close(context.Background())
		}
	}()
	want := make([][]float32, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	var graphMu sync.Mutex
	for r, g := range local {
		wg.Add(1)
		go func() { defer wg.Done(); want[r], errs[r] = ddpTrain(context.Background(), g, &graphMu) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got[1]) != fmt.Sprint(got[0]) {
		t.Fatal("the two processes ended with different parameters")
	}
	if len(got[0]) != len(want[0]) {
		t.Fatalf("%d parameters, want %d", len(got[0]), len(want[0]))
	}
	worst := 0.0
	for i := range want[0] {
		d := math.Abs(float64(got[0][i]-want[0][i])) / math.Max(1, math.Abs(float64(want[0][i])))
		if d > 1e-6 {
			t.Fatalf("param %d: processes over NCCL %v, in-process comm %v", i, got[0][i], want[0][i])
		}
		worst = max(worst, d)
	}
	t.Logf("%d parameters, largest difference from the in-process run %.2g (relative)", len(want[0]), worst)
}
