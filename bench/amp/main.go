// Command amp measures what CPU autocast costs: the training step time (forward, backward,
// GradScaler unscale, SGD step) of a small conv net and of resnet18, at 64x64 with batch 16,
// in float32 and under bf16 and fp16 autocast, and prints the overhead against float32 as a
// table and a JSON line (also written to bench/results/amp.json).
//
// The emulated autocast is slower than float32, never faster: gorgonia has no 16-bit
// kernels, so every lower-precision op gains rounding passes over its inputs, its output and
// their gradients, and the arithmetic stays float32. The numbers say what the numerics cost
// on this machine, not what mixed precision saves on a GPU.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/optim"
	G "gorgonia.org/gorgonia"
)

type row struct {
	Model      string  `json:"model"`
	Mode       string  `json:"mode"`
	MsPerStep  float64 `json:"ms_per_step"`
	ImgsPerSec float64 `json:"imgs_per_s"`
	Overhead   float64 `json:"overhead_vs_fp32"`
}

func main() {
	steps := flag.Int("steps", 7, "timed steps per configuration")
	warmup := flag.Int("warmup", 2, "untimed steps first")
	batch := flag.Int("batch", 16, "batch size")
	size := flag.Int("size", 64, "image height and width")
	out := flag.String("out", "bench/results/amp.json", "JSON results file (empty: none)")
	flag.Parse()
	if err := run(*steps, *warmup, *batch, *size, *out); err != nil {
		log.Fatal(err)
	}
}

func run(steps, warmup, batch, size int, out string) error {
	prov := benchutil.Start("amp", os.Args[1:])
	fmt.Printf("autocast step time on the CPU: %dx%d, batch %d, median of %d interleaved steps after %d warm-up, BLAS %s, GOMAXPROCS %d\n",
		size, size, batch, steps, warmup, blasimpl.Name(), runtime.GOMAXPROCS(0))
	fmt.Println("emulated 16-bit: rounding passes added to float32 compute, so overhead, not speed-up")
	models := []struct {
		name string
		make func() (nn.Module, error)
	}{
		{"smallconv", func() (nn.Module, error) { return smallConv(), nil }},
		{"resnet18", func() (nn.Module, error) { return resnet.ResNet18(10) }},
	}
	modes := []struct {
		name   string
		policy *amp.Policy
	}{{"fp32", nil}, {"bf16", amp.Autocast(amp.BF16)}, {"fp16", amp.Autocast(amp.FP16)}}
	var rows []row
	fmt.Printf("%-10s %-5s %12s %10s %20s\n", "model", "mode", "ms/step", "img/s", "overhead vs fp32")
	for _, m := range models {
		// The modes run interleaved, one step each in turn, and the median step counts: load
		// from other processes on a shared machine then hits every mode alike.
		stepFns := make([]func() error, len(modes))
		for i, mode := range modes {
			net, err := m.make()
			if err != nil {
				return err
			}
			fn, closeFn, err := setup(net, mode.policy, batch, size)
			if err != nil {
				return fmt.Errorf("%s %s: %w", m.name, mode.name, err)
			}
			defer closeFn()
			stepFns[i] = fn
		}
		times := make([][]float64, len(modes))
		for it := 0; it < warmup+steps; it++ {
			for i, fn := range stepFns {
				start := time.Now()
				if err := fn(); err != nil {
					return fmt.Errorf("%s %s: %w", m.name, modes[i].name, err)
				}
				if it >= warmup {
					times[i] = append(times[i], time.Since(start).Seconds())
				}
			}
		}
		base := median(times[0])
		for i, mode := range modes {
			sec := median(times[i])
			r := row{Model: m.name, Mode: mode.name, MsPerStep: 1000 * sec, ImgsPerSec: float64(batch) / sec, Overhead: sec/base - 1}
			rows = append(rows, r)
			fmt.Printf("%-10s %-5s %12.1f %10.1f %19.1f%%\n", r.Model, r.Mode, r.MsPerStep, r.ImgsPerSec, 100*r.Overhead)
		}
	}
	res := map[string]any{"bench": "amp", "image": size, "batch": batch, "steps": steps,
		"blas": blasimpl.Name(), "gomaxprocs": runtime.GOMAXPROCS(0), "rows": rows,
		"note":  "emulated autocast: float32 compute plus rounding passes; overhead is relative to float32 step time",
		"units": map[string]string{"image": "pixels per side", "batch": "images per step", "overhead_vs_fp32": "fraction of the fp32 step time (0.1: 10% slower)"}}
	prov.End()
	prov.Set(res)
	if out == "" {
		line, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Println(string(line))
		return nil
	}
	return prov.Save(os.Stdout, out, res)
}

// setup compiles net under policy (nil: float32) and returns one training step: forward,
// backward, unscale, SGD step, scale update.
func setup(net nn.Module, policy *amp.Policy, batch, size int) (step func() error, closeFn func() error, err error) {
	model, err := nn.NewModel(net, nn.WithSeed(1))
	if err != nil {
		return nil, nil, err
	}
	scaler, err := amp.NewGradScaler(amp.WithEnabled(policy != nil), amp.WithInitScale(1024))
	if err != nil {
		return nil, nil, err
	}
	opts := []nn.BuildOption{}
	if policy != nil {
		opts = append(opts, nn.WithAutocast(policy))
	}
	prog, err := nn.Compile(model, func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", batch, 3, size, size)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("labels", batch)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(x)
		if err != nil {
			return nil, err
		}
		loss, err := ops.CrossEntropy(logits, y, 0)
		if err != nil {
			return nil, err
		}
		return scaler.ScaleLoss(b, loss)
	}, opts...)
	if err != nil {
		return nil, nil, err
	}
	segs, err := optim.Segments(model.Params, 0)
	if err != nil {
		prog.Close()
		return nil, nil, err
	}
	opt, err := optim.NewSGD(segs, 0.01, optim.WithMomentum(0.9))
	if err != nil {
		prog.Close()
		return nil, nil, err
	}
	rng := rand.New(rand.NewSource(2))
	x, _ := prog.Input("images")
	y, _ := prog.Input("labels")
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = float32(rng.Intn(10))
	}
	ctx := context.Background()
	step = func() error {
		model.Params.ZeroGrad()
		if err := prog.Run(ctx); err != nil {
			return err
		}
		scaler.Unscale(model.Params.Grad)
		if _, err := scaler.Step(opt); err != nil {
			return err
		}
		return scaler.Update()
	}
	return step, prog.Close, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// smallConv is three conv-BN-ReLU layers (16, 32, 64 channels, the last two strided), global
// pooling and a linear head.
func smallConv() nn.Module {
	conv := func(in, out, stride int) *nn.Conv2d {
		return &nn.Conv2d{In: in, Out: out, Kernel: [2]int{3, 3}, Stride: [2]int{stride, stride}, Padding: [2]int{1, 1}}
	}
	return &nn.Sequential{Layers: []nn.Module{
		conv(3, 16, 1), &nn.BatchNorm2d{C: 16}, &nn.ReLU{},
		conv(16, 32, 2), &nn.BatchNorm2d{C: 32}, &nn.ReLU{},
		conv(32, 64, 2), &nn.BatchNorm2d{C: 64}, &nn.ReLU{},
		&nn.AdaptiveAvgPool2d{}, &nn.Flatten{}, &nn.Linear{In: 64, Out: 10},
	}}
}
