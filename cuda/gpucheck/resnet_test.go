package gpucheck

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/gpuresnet"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
)

// One resnet18 training step (batch 4, 64x64, 10 classes) on the GPU against the CPU tape
// (models.Run) from identical parameters: logits and loss to 5e-4 of their scale, every
// parameter gradient and BatchNorm running statistic to 5e-3 of its scale. The bounds cover
// cuDNN's Winograd/FFT convolutions (1e-4 each) and float32 summation order through 20
// layers, amplified by the batch-norm backward over few elements per channel (2x2x4 at the
// last stage); with im2col the emulator measures 4e-6 and 1.3e-5.
func TestResNet18StepVsCPU(t *testing.T) {
	root, err := resnet.ResNet18(10)
	if err != nil {
		t.Fatal(err)
	}
	stepVsCPU(t, root, 64)
}

// A small Bottleneck ResNet (resnet50's block: stride on the 3x3 convolution, expansion 4,
// downsample in every stage), with the same bounds as TestResNet18StepVsCPU.
func TestBottleneckStepVsCPU(t *testing.T) {
	root, err := resnet.New(resnet.Config{Block: resnet.Bottleneck, Layers: [4]int{1, 2, 1, 1}, Widths: [4]int{8, 16, 16, 32},
		StemWidth: 16, NumClasses: 7})
	if err != nil {
		t.Fatal(err)
	}
	stepVsCPU(t, root, 64)
}

func stepVsCPU(t *testing.T, root *resnet.ResNet, side int) {
	d := device(t)
	m, err := nn.NewModel(root, nn.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(19, 20))
	shape := []int{4, 3, side, side}
	x := randn(r, 4*3*side*side, 1)
	classes := int32(root.Config().NumClasses)
	labels := []int32{3 % classes, 7 % classes, 0, 9 % classes}
	g, err := gpuresnet.New(d, m) // uploads before the CPU step moves the running statistics
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	ctx := context.Background()
	start := time.Now()
	res, err := g.Step(ctx, x, shape, labels, true)
	if err != nil {
		t.Fatal(err)
	}
	gpuTime := time.Since(start)
	grad := make([]float32, len(m.Params.Grad))
	if err := g.Grads(ctx, grad); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	cpu, err := models.Run(m, x, shape, floatLabels(labels), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("step: GPU %v (first, includes JIT and allocation), CPU %v", gpuTime, time.Since(start))
	checkLogitsLoss(t, res.Logits, res.Loss, cpu)
	rows := gradErrs(m, grad, cpu)
	for _, b := range cpu.Buffers {
		if b.F32 == nil {
			continue
		}
		v, err := g.Buffer(ctx, b.Name)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, errRow{b.Name, relErr(v, f64(b.F32))})
	}
	checkErrs(t, rows, 5)
}

// TestResNet50Throughput prints training images/s (forward, backward, SGD with momentum) of
// resnet50 at 224x224, batch 64, in float32 and with autocast fp16/bf16: the numbers
// torch_bench.py measures with PyTorch on the same GPU.
func TestResNet50Throughput(t *testing.T) {
	d := device(t)
	if testing.Short() {
		t.Skip("-short")
	}
	root, err := resnet.ResNet50(1000)
	if err != nil {
		t.Fatal(err)
	}
	const batch, warmup, steps = 64, 3, 10
	m, x, shape, labels := benchInputs(t, root, batch, 21, 22)
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		dt   cuda.DType
	}{{"float32", cuda.Float32}, {"autocast-fp16", cuda.Float16}, {"autocast-bf16", cuda.BFloat16}} {
		ips := func() float64 {
			g, err := gpuresnet.New(d, m, gpuresnet.WithAutocast(mode.dt))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Free()
			return trainThroughput(t, d, mode.name, batch, warmup, steps, func() (float32, error) {
				res, err := g.Step(ctx, x, shape, labels, false)
				if err != nil {
					return 0, err
				}
				return res.Loss, nil
			}, g.SGD)
		}()
		st := d.MemoryStats()
		impl, _ := d.ConvImplInUse()
		t.Logf("resnet50 224x224 batch %d %s: %.1f images/s (input copy included, convolution by %v), peak device memory %.1f GiB",
			batch, mode.name, ips, impl, float64(st.PeakInUse)/(1<<30))
		fmt.Printf("{\"bench\":\"resnet50\",\"impl\":\"gp\",\"mode\":%q,\"batch\":%d,\"image\":224,\"images_per_s\":%.1f,\"conv\":%q}\n",
			mode.name, batch, ips, impl.String())
	}
}

// Autocast's resnet18 step (16-bit convolution and classifier operands, float32
// accumulation) stays within 5e-2 of the float32 step's logits (max-abs relative) and its
// flat gradient within 0.5 in norm (‖g−g32‖/‖g32‖): a sanity bound, not an equivalence. At
// initialisation the gradient error grows layer by layer going backward (emulator, bf16: fc
// 0.3%, last block 6%, stem 33%; fp16 about 12% overall), because each batch-norm backward
// subtracts nearly equal means over 16-256 values per channel and so amplifies the operands'
// rounding; PyTorch's autocast has the same property. (Not run on the emulator, where the
// GEMM and convolution checks cover the 16-bit paths: three steps take it 20 s.)
func TestResNet18AutocastNearFloat32(t *testing.T) {
	d := device(t)
	root, err := resnet.ResNet18(10)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(root, nn.WithSeed(2))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(23, 24))
	shape := []int{4, 3, 64, 64}
	x := randn(r, 4*3*64*64, 1)
	labels := []int32{1, 2, 3, 4}
	ctx := context.Background()
	run := func(dt cuda.DType) ([]float32, []float32) {
		g, err := gpuresnet.New(d, m, gpuresnet.WithAutocast(dt))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Free()
		res, err := g.Step(ctx, x, shape, labels, true)
		if err != nil {
			t.Fatal(err)
		}
		grad := make([]float32, len(m.Params.Grad))
		if err := g.Grads(ctx, grad); err != nil {
			t.Fatal(err)
		}
		return res.Logits, grad
	}
	want, wantGrad := run(cuda.Float32)
	for _, dt := range []cuda.DType{cuda.BFloat16, cuda.Float16} {
		got, grad := run(dt)
		e, ge := relErr(got, f64(want)), normErr(grad, wantGrad)
		if !(e <= 5e-2) || !(ge <= 0.5) {
			t.Errorf("autocast %v: logits rel err %.3g (bound 5e-2), gradients %.3g (bound 0.5)", dt, e, ge)
		} else {
			t.Logf("autocast %v: logits rel err %.2g, gradients %.2g", dt, e, ge)
		}
	}
}

// normErr is ‖got−want‖/‖want‖.
func normErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// Evaluation mode (running statistics) after one training step, against the CPU, and
// SetParams after a host-side change of the parameters.
func TestResNetEvalVsCPU(t *testing.T) {
	d := device(t)
	root, err := resnet.New(resnet.Config{Block: resnet.Basic, Layers: [4]int{1, 1, 1, 1}, Widths: [4]int{8, 16, 16, 32}, StemWidth: 8, NumClasses: 5})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(root, nn.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(25, 26))
	shape := []int{4, 3, 32, 32}
	x := randn(r, 4*3*32*32, 1)
	ctx := context.Background()
	g, err := gpuresnet.New(d, m)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	if _, err := g.Step(ctx, x, shape, []int32{0, 1, 2, 3}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := models.Run(m, x, shape, []float32{0, 1, 2, 3}, true); err != nil { // same running statistics on the CPU
		t.Fatal(err)
	}
	for _, p := range m.Params.Params {
		for i := range p.Data {
			p.Data[i] *= 0.9
		}
	}
	if err := g.SetParams(); err != nil {
		t.Fatal(err)
	}
	got, err := g.Eval(ctx, x, shape)
	if err != nil {
		t.Fatal(err)
	}
	want, err := models.Run(m, x, shape, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(got, f64(want.Logits)); !(e <= 5e-4) {
		t.Fatalf("eval logits: relative error %.3g > 5e-4", e)
	} else {
		t.Logf("eval logits rel err %.2g", e)
	}
}
