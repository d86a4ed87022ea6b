package tape_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// modelTol bounds the difference from the CPU of the tiny models below after their steps,
// relative to each tensor's scale. The CPU's norms, softmaxes and losses accumulate in
// float64 where the device kernels accumulate in float32, and the GEMMs and convolutions sum
// in other orders: each op differs by ~1e-7..1e-6 relative, and a few SGD steps through
// ~20 layers amplify that to ~1e-5 (the measured values are logged). A wrong kernel (a
// transposed operand, a dropped sample, a missing bias) is off by 1e-2 or more.
const modelTol = 1e-4

func tinyResNet() (nn.Module, error) {
	return resnet.New(resnet.Config{Block: resnet.Basic, Layers: [4]int{1, 1, 1, 1}, Widths: [4]int{4, 4, 8, 8}, StemWidth: 4, NumClasses: 5})
}

// tinySwin has shifted windows with a mask (stage 1: a 4×4 map in 2×2 windows), an
// unshifted stage (2×2 map), PatchMerging's gathers and stochastic depth.
func tinySwin() (nn.Module, error) {
	return swin.New(swin.Config{EmbedDim: 8, Depths: []int{2, 2}, Heads: []int{2, 2}, Window: 2, NumClasses: 5, StochasticDepth: 0.3})
}

// The tiny ResNet and Swin trained 3 steps (SGD with momentum, label smoothing 0.1) on the
// device equal nn.Compile's CPU run: the loss of every step, every parameter and buffer after
// (BatchNorm's running statistics and num_batches_tracked, updated on the device and copied
// back), the stochastic-depth masks (same RNG stream, so same losses), and then the logits
// of an eval-mode program of each (running statistics, no dropout).
func TestModelsMatchCPU(t *testing.T) {
	d := device(t)
	const batch, steps, hw = 4, 3, 16
	for _, c := range []struct {
		name string
		new  func() (nn.Module, error)
	}{{"resnet", tinyResNet}, {"swin", tinySwin}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			var ms [2]*nn.Model
			for i := range ms {
				root, err := c.new()
				if err != nil {
					t.Fatal(err)
				}
				if ms[i], err = nn.NewModel(root, nn.WithSeed(7)); err != nil {
					t.Fatal(err)
				}
			}
			opt := func(m *nn.Model) nn.BuildOption {
				segs, err := optim.Segments(m.Params, 1e-4)
				if err != nil {
					t.Fatal(err)
				}
				sgd, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
				if err != nil {
					t.Fatal(err)
				}
				return nn.WithOptimizer(sgd)
			}
			build := nn.Classify(batch, []int{3, hw, hw}, 0.1)
			cpu, err := nn.Compile(ms[0], build, opt(ms[0]))
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			dev, err := tape.Compile(d, ms[1], build, opt(ms[1]))
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			rng := rand.New(rand.NewSource(3))
			x, y := make([]float32, batch*3*hw*hw), make([]float32, batch)
			var worst float64
			for s := range steps {
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				for i := range y {
					y[i] = float32(rng.Intn(5))
				}
				for _, p := range []interface {
					SetInput(string, []float32) error
				}{cpu, dev} {
					if err := p.SetInput("images", x); err != nil {
						t.Fatal(err)
					}
					if err := p.SetInput("labels", y); err != nil {
						t.Fatal(err)
					}
				}
				if err := cpu.Run(ctx); err != nil {
					t.Fatal(err)
				}
				if err := dev.Run(ctx); err != nil {
					t.Fatal(err)
				}
				lc, _ := cpu.LossValue()
				ld, _ := dev.LossValue()
				rel := maxRel([]float32{ld}, []float32{lc})
				worst = max(worst, rel)
				t.Logf("step %d: loss cpu %.7f device %.7f (rel %.1e)", s, lc, ld, rel)
				if rel > modelTol {
					t.Fatalf("step %d: loss %v on the device, %v on the CPU", s, ld, lc)
				}
				for _, p := range []interface{ Step(context.Context) error }{cpu, dev} {
					if err := p.Step(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if sc, cc := ms[0].RNG.State(); true {
				if sd, cd := ms[1].RNG.State(); sd != sc || cd != cc {
					t.Errorf("RNG after the steps: device (%d, %d), CPU (%d, %d)", sd, cd, sc, cc)
				}
			}
			pw, pname := 0.0, ""
			for i, p := range ms[0].Params.Params {
				if r := maxRel(ms[1].Params.Params[i].Data, p.Data); r > pw {
					pw, pname = r, p.Name
				}
			}
			bw, bname := 0.0, ""
			for i, b := range ms[0].Params.Buffers {
				o := ms[1].Params.Buffers[i]
				if b.Int64 != nil {
					if fmt.Sprint(b.Int64) != fmt.Sprint(o.Int64) {
						t.Errorf("buffer %s: %v on the device, %v on the CPU", b.Name, o.Int64, b.Int64)
					}
					continue
				}
				if r := maxRel(o.Data, b.Data); r > bw {
					bw, bname = r, b.Name
				}
			}
			t.Logf("after %d steps: losses within %.1e, parameters within %.1e (%s), buffers within %.1e (%s)", steps, worst, pw, pname, bw, bname)
			if pw > modelTol || bw > modelTol {
				t.Fatalf("parameters differ by %.1e (%s), buffers by %.1e (%s); tolerance %.0e", pw, pname, bw, bname, modelTol)
			}

			ce, de := evalPrograms(t, d, ms[:], batch, hw)
			r, ld, lc := evalLogits(t, ctx, x, ce, de)
			t.Logf("eval logits within %.1e", r)
			if r > modelTol {
				t.Fatalf("eval logits differ by %.1e: device %v, CPU %v", r, ld, lc)
			}
		})
	}
}

// The running statistics stay on the device between Runs (Note [Running statistics on the
// device]), yet the host buffers are the model's: after each Run they hold the device's
// values, and values written on the host between Runs (a restored checkpoint, a broadcast)
// are what the next Run updates, in training, and normalises with, in eval. Each case
// writes the host buffers of both models alike before the second step and compares the
// buffers after it, and an eval program's logits, with the CPU's.
func TestRunningStatsFollowHost(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	const batch, hw = 4, 16
	for _, c := range []struct {
		name  string
		write func(b []float32, i int) float32 // the value written at element i before step 2, or b[i]
	}{
		{"unchanged", func(b []float32, i int) float32 { return b[i] }},
		{"restored", func(b []float32, i int) float32 { return 0.5 + float32(i%7)/4 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ms [2]*nn.Model
			for i := range ms {
				root, err := tinyResNet()
				if err != nil {
					t.Fatal(err)
				}
				if ms[i], err = nn.NewModel(root, nn.WithSeed(7)); err != nil {
					t.Fatal(err)
				}
			}
			build := nn.Classify(batch, []int{3, hw, hw}, 0)
			cpu, err := nn.Compile(ms[0], build)
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			dev, err := tape.Compile(d, ms[1], build)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			rng := rand.New(rand.NewSource(5))
			x, y := make([]float32, batch*3*hw*hw), make([]float32, batch)
			for step := range 2 {
				if step == 1 {
					for _, m := range ms {
						for _, b := range m.Params.Buffers {
							for i := range b.Data {
								b.Data[i] = c.write(b.Data, i)
							}
						}
					}
				}
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				for i := range y {
					y[i] = float32(rng.Intn(5))
				}
				for _, p := range []interface {
					SetInput(string, []float32) error
					Run(context.Context) error
				}{cpu, dev} {
					if err := p.SetInput("images", x); err != nil {
						t.Fatal(err)
					}
					if err := p.SetInput("labels", y); err != nil {
						t.Fatal(err)
					}
					if err := p.Run(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			worst, name := 0.0, ""
			for i, b := range ms[0].Params.Buffers {
				if b.Data == nil {
					continue
				}
				if r := maxRel(ms[1].Params.Buffers[i].Data, b.Data); r > worst {
					worst, name = r, b.Name
				}
			}
			t.Logf("buffers within %.1e (%s)", worst, name)
			if worst > modelTol {
				t.Fatalf("buffers differ by %.1e (%s) after the host wrote them between Runs", worst, name)
			}
			for _, m := range ms {
				for _, b := range m.Params.Buffers {
					for i := range b.Data {
						b.Data[i] = c.write(b.Data, i)
					}
				}
			}
			ce, de := evalPrograms(t, d, ms[:], batch, hw)
			for run := range 2 { // the second Run finds the device's copy current
				if r, _, _ := evalLogits(t, ctx, x, ce, de); r > modelTol {
					t.Fatalf("eval run %d: logits differ by %.1e", run, r)
				}
			}
		})
	}
}

// evalPrograms compiles the eval program of ms[0] on the CPU and of ms[1] on d, closed with
// the test.
func evalPrograms(t *testing.T, d *cuda.Device, ms []*nn.Model, batch, hw int) (*nn.Program, *tape.Program) {
	t.Helper()
	eval := nn.Classify(batch, []int{3, hw, hw}, 0)
	ce, err := nn.Compile(ms[0], eval, nn.Training(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ce.Close() })
	de, err := tape.Compile(d, ms[1], eval, nn.Training(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { de.Close() })
	return ce, de
}

// evalLogits runs both eval programs on images x and returns how far the device's logits
// are from the CPU's (maxRel), and both.
func evalLogits(t *testing.T, ctx context.Context, x []float32, ce *nn.Program, de *tape.Program) (r float64, ld, lc []float32) {
	t.Helper()
	for _, p := range []interface {
		SetInput(string, []float32) error
		Run(context.Context) error
	}{ce, de} {
		if err := p.SetInput("images", x); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lc, _ = ce.Output("logits")
	ld, _ = de.Output("logits")
	return maxRel(ld, lc), ld, lc
}
