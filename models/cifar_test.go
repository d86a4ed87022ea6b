package models_test

import (
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
)

// cifarParams is the learnable parameter count of a CIFAR ResNet with n BasicBlocks per stage
// at widths w, a 1x1 conv + BN downsample at each stage change, and a 10-way fc, counted
// layer by layer from He et al. 2016 §4.2 (option B shortcuts), independently of the code.
func cifarParams(n int, w [3]int, classes int) int {
	conv := func(in, out, k int) int { return in * out * k * k }
	bn := func(c int) int { return 2 * c }
	total := conv(3, w[0], 3) + bn(w[0])
	in := w[0]
	for s := range 3 {
		for b := range n {
			total += conv(in, w[s], 3) + bn(w[s]) + conv(w[s], w[s], 3) + bn(w[s])
			if b == 0 && in != w[s] {
				total += conv(in, w[s], 1) + bn(w[s])
			}
			in = w[s]
		}
	}
	return total + in*classes + classes
}

// Every CIFAR ResNet has the paper's layer count and parameter count, torchvision-style
// names, and maps [N, 3, 28, 28] to [N, classes]. resnet20 is the paper's 0.27M network
// (269,722 with option A shortcuts; option B's two projections add 2,752).
func TestCIFARResNetShapes(t *testing.T) {
	if got := cifarParams(3, [3]int{16, 32, 64}, 10); got != 269722+2752 {
		t.Fatalf("reference count of resnet20: %d, want %d", got, 269722+2752)
	}
	for _, arch := range resnet.CIFARArchs {
		t.Run(arch, func(t *testing.T) {
			mod, err := models.New(arch, 0)
			if err != nil {
				t.Fatal(err)
			}
			c := mod.(*resnet.CIFARResNet).Config()
			depth, err := strconv.Atoi(strings.Split(strings.TrimPrefix(arch, "resnet"), "_")[0])
			if err != nil || 6*c.Blocks+2 != depth || c.Name() != arch {
				t.Fatalf("%s: %d blocks per stage is %d layers; named %q", arch, c.Blocks, 6*c.Blocks+2, c.Name())
			}
			m, err := nn.NewModel(mod, nn.WithSeed(1))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := m.Params.NumParams(), cifarParams(c.Blocks, c.Widths, 10); got != want {
				t.Errorf("%d parameters, want %d", got, want)
			}
			names := map[string][]int{}
			for _, p := range m.Params.Params {
				names[p.Name] = p.Shape
			}
			for name, shape := range map[string][]int{
				"conv1.weight":                 {c.Widths[0], 3, 3, 3},
				"layer1.0.conv1.weight":        {c.Widths[0], c.Widths[0], 3, 3},
				"layer2.0.downsample.0.weight": {c.Widths[1], c.Widths[0], 1, 1},
				"layer3.0.downsample.1.weight": {c.Widths[2]},
				"fc.weight":                    {10, c.Widths[2]},
			} {
				if got := names[name]; !equalInts(got, shape) {
					t.Errorf("%s: shape %v, want %v", name, got, shape)
				}
			}
			if _, ok := names["layer1.0.downsample.0.weight"]; ok {
				t.Errorf("layer1 keeps the width: it has no downsample")
			}
			x := make([]float32, 2*3*28*28)
			out, err := models.Run(m, x, []int{2, 3, 28, 28}, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			if !equalInts(out.Shape, []int{2, 10}) {
				t.Errorf("logits %v, want [2 10]", out.Shape)
			}
		})
	}
	for _, name := range []string{"resnet9", "resnet2", "resnet50", "resnet8_w16", "resnet8_s2_w24", "resnet8_w0", "resnet8_s3"} {
		if _, err := resnet.CIFARArch(name, 10); err == nil {
			t.Errorf("%s (not 6n+2 >= 8, torchvision's, or not canonical) parsed", name)
		}
	}
	if c, err := resnet.CIFARArch("resnet110_w8_s2", 0); err != nil || c.Blocks != 18 || c.Widths != [3]int{8, 16, 32} || c.StemStride != 2 {
		t.Errorf("resnet110_w8_s2: %+v, %v", c, err)
	}
	mod, _ := models.New("resnet8", 10)
	m, err := nn.NewModel(mod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := models.Run(m, make([]float32, 28*28), []int{1, 1, 28, 28}, nil, false); err == nil || !strings.Contains(err.Error(), "conv1") {
		t.Errorf("a grey [1 1 28 28] input: %v, want an error naming conv1", err)
	}
}

// One train-mode forward/backward of resnet8 on a fixed batch: every parameter gets a finite,
// non-zero gradient, and the gradient of each of the stem, a block, a downsample, a BatchNorm
// and the classifier agrees with a central difference of the loss along it. Tolerance 3%:
// the ReLUs' kinks make the difference quotient move by about 1% per 1e-3 of step (measured:
// element-wise quotients of the stem converge linearly as the step shrinks), and float32
// resolves the loss change of a 1e-3 step to ~1e-4 relative. Train mode normalises with the
// batch's own statistics, so each loss is a function of the weights alone.
func TestCIFARResNetGradients(t *testing.T) {
	mod, err := models.New("resnet8", 10)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(mod, nn.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	shape := []int{4, 3, 12, 12}
	rng := rand.New(rand.NewSource(4))
	x := make([]float32, 4*3*12*12)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := []float32{0, 3, 7, 9}
	out, err := models.Run(m, x, shape, y, true)
	if err != nil {
		t.Fatal(err)
	}
	grads := map[string][]float32{}
	for _, g := range out.Grads {
		var norm float64
		for _, v := range g.F32 {
			norm += float64(v) * float64(v)
		}
		if math.IsNaN(norm) || math.IsInf(norm, 0) || norm == 0 {
			t.Errorf("%s: gradient norm² %g", g.Name, norm)
		}
		grads[g.Name] = g.F32
	}
	param := map[string][]float32{}
	for _, p := range m.Params.Params {
		param[p.Name] = p.Data
	}
	const eps, tol = 1e-3, 0.03
	// Along the gradient itself, tensor by tensor: the directional derivative is |g|, and a
	// step of eps along g/|g| moves the loss by eps·|g|, far above float32's resolution.
	for _, name := range []string{"conv1.weight", "layer1.0.conv2.weight", "layer2.0.downsample.0.weight", "layer3.0.bn1.weight", "fc.weight", "fc.bias"} {
		w, g := param[name], grads[name]
		var norm float64
		for _, v := range g {
			norm += float64(v) * float64(v)
		}
		norm = math.Sqrt(norm)
		orig := append([]float32(nil), w...)
		loss := func(step float64) float64 {
			for i := range w {
				w[i] = orig[i] + float32(step*float64(g[i])/norm)
			}
			o, err := models.Run(m, x, shape, y, true)
			if err != nil {
				t.Fatal(err)
			}
			return float64(o.Loss)
		}
		num := (loss(eps) - loss(-eps)) / (2 * eps)
		copy(w, orig)
		if math.Abs(num-norm) > tol*norm {
			t.Errorf("%s: |gradient| %.6g, central difference along it %.6g", name, norm, num)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
