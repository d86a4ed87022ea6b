package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
	G "gorgonia.org/gorgonia"
)

// workload is the benchmarked training job.
type workload struct {
	replicas, batch, size, steps, warmup int
}

const classes = 1000

// runWorker runs one configuration in this process and prints its measurement.
func runWorker(ctx context.Context, role string, w workload) error {
	r18, err := resnet.ResNet18(classes)
	if err != nil {
		return err
	}
	m, err := nn.NewModel(r18, nn.WithSeed(1))
	if err != nil {
		return err
	}
	segs, err := optim.Segments(m.Params, 1e-4)
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD(segs, 0.01, optim.WithMomentum(0.9))
	if err != nil {
		return err
	}
	meas := measurement{Role: role, Threads: blasimpl.Threads()}
	switch role {
	case "single":
		err = runSingle(ctx, m, opt, w, &meas)
	case "dp":
		err = runDP(ctx, m, opt, w, &meas)
	case "ddp":
		err = runDDP(ctx, m, opt, w, &meas)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", role, err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	meas.HeapMiB = float64(ms.HeapInuse) / (1 << 20)
	js, err := json.Marshal(meas)
	if err != nil {
		return err
	}
	fmt.Println(marker + string(js))
	return nil
}

// chunk builds resnet18 for n images with the mean cross-entropy loss.
func chunk(size int) dp.ChunkFunc {
	return func(b *nn.Builder, n int) (*G.Node, error) {
		x, err := b.Input("images", n, 3, size, size)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("labels", n)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(x)
		if err != nil {
			return nil, err
		}
		b.Output("logits", logits)
		return ops.CrossEntropy(logits, y, 0)
	}
}

// data returns n random images and labels (the same for every step: only time is measured).
func data(seed int64, n, size int) (x, y []float32) {
	rng := rand.New(rand.NewSource(seed))
	x, y = make([]float32, n*3*size*size), make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = float32(rng.Intn(classes))
	}
	return x, y
}

// timeSteps runs warmup+steps steps and records the median and mean wall time and the mean
// CPU time (user+system, all threads of the process) of the measured ones.
func timeSteps(w workload, meas *measurement, step func() error) error {
	var times []float64
	var cpu0 float64
	for i := 0; i < w.warmup+w.steps; i++ {
		if i == w.warmup {
			cpu0 = benchutil.CPUSeconds()
		}
		t := time.Now()
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		if i >= w.warmup {
			times = append(times, since(t))
		}
	}
	meas.CPUS = (benchutil.CPUSeconds() - cpu0) / float64(w.steps)
	for _, t := range times {
		meas.MeanStepS += t / float64(len(times))
	}
	slices.Sort(times)
	meas.StepS = times[len(times)/2]
	return nil
}

// masterBytes is what a process that owns the model holds besides its graph: parameters,
// running statistics, the gradient buffer and the optimizer state.
func masterBytes(m *nn.Model, opt optim.Optimizer) int64 {
	ps := m.Params
	n := 8*int64(len(ps.Data)) + optim.StateBytes(opt)
	for _, b := range ps.Buffers {
		n += 4*int64(len(b.Data)) + 8*int64(len(b.Int64))
	}
	return n
}

func runSingle(ctx context.Context, m *nn.Model, opt optim.Optimizer, w workload, meas *measurement) error {
	build := chunk(w.size)
	p, err := nn.Compile(m, func(b *nn.Builder) (*G.Node, error) { return build(b, w.batch) })
	if err != nil {
		return err
	}
	defer p.Close()
	x, y := data(1, w.batch, w.size)
	err = timeSteps(w, meas, func() error {
		opt.ZeroGrad()
		if err := p.SetInput("images", x); err != nil {
			return err
		}
		if err := p.SetInput("labels", y); err != nil {
			return err
		}
		if err := p.Run(ctx); err != nil {
			return err
		}
		return opt.Step()
	})
	if err != nil {
		return err
	}
	l, _ := p.LossValue()
	meas.Loss = float64(l)
	meas.Memory = []int64{dp.ProgramBytes(p) + masterBytes(m, opt)}
	return nil
}

func runDP(ctx context.Context, m *nn.Model, opt optim.Optimizer, w workload, meas *measurement) error {
	d, err := dp.New(m, chunk(w.size), dp.WithReplicas(w.replicas), dp.WithGather("logits"))
	if err != nil {
		return err
	}
	defer d.Close()
	x, y := data(1, w.batch, w.size)
	b := dp.Batch{N: w.batch, Inputs: map[string][]float32{"images": x, "labels": y}}
	var (
		res   *dp.Result
		n     int
		times dp.Times
	)
	err = timeSteps(w, meas, func() error {
		opt.ZeroGrad()
		if res, err = d.Run(ctx, b); err != nil {
			return err
		}
		if n++; n > w.warmup {
			times.Run += res.Times.Run
			times.Gather += res.Times.Gather
			times.Reduce += res.Times.Reduce
		}
		return opt.Step()
	})
	if err != nil {
		return err
	}
	meas.Loss = float64(res.Loss)
	meas.RunS = times.Run.Seconds() / float64(w.steps)
	meas.MasterS = (times.Gather + times.Reduce).Seconds() / float64(w.steps)
	rep := d.Memory(opt)
	fmt.Fprintln(os.Stderr, rep)
	for _, r := range rep.Replicas {
		meas.Memory = append(meas.Memory, r.Total())
	}
	return nil
}

func runDDP(ctx context.Context, m *nn.Model, opt optim.Optimizer, w workload, meas *measurement) error {
	// One rank of several on this host: the runtime's monitor thread yields the cores to the
	// compute (parallel/sysmon), as in every program the launcher starts.
	if _, err := sysmon.Lower(); err != nil {
		return err
	}
	g, err := comm.InitFromEnv(ctx)
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	d, err := ddp.New(ctx, m, g)
	if err != nil {
		return err
	}
	meas.Rank = d.Rank()
	local := w.batch / d.Size()
	build := chunk(w.size)
	p, err := d.Compile(func(b *nn.Builder) (*G.Node, error) { return build(b, local) }, nn.WithOptimizer(opt))
	if err != nil {
		return err
	}
	defer p.Close()
	x, y := data(int64(1+d.Rank()), local, w.size)
	err = timeSteps(w, meas, func() error {
		opt.ZeroGrad()
		if err := p.SetInput("images", x); err != nil {
			return err
		}
		if err := p.SetInput("labels", y); err != nil {
			return err
		}
		return p.RunStep(ctx)
	})
	if err != nil {
		return err
	}
	l, _ := p.LossValue()
	meas.Loss = float64(l)
	meas.Memory = []int64{dp.ProgramBytes(p.Compiled()) + masterBytes(m, opt)}
	return nil
}
