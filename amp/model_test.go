package amp

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// convNet is conv-BN-ReLU twice, global pool, linear: the small conv net of these tests.
func convNet() nn.Module {
	return &nn.Sequential{
		Names: []string{"conv1", "bn1", "relu1", "conv2", "bn2", "relu2", "pool", "flat", "fc"},
		Layers: []nn.Module{
			&nn.Conv2d{In: 3, Out: 8, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}},
			&nn.BatchNorm2d{C: 8}, &nn.ReLU{},
			&nn.Conv2d{In: 8, Out: 8, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}},
			&nn.BatchNorm2d{C: 8}, &nn.ReLU{},
			&nn.AdaptiveAvgPool2d{}, &nn.Flatten{},
			&nn.Linear{In: 8, Out: 10},
		},
	}
}

// classifier builds images -> logits -> weight·cross-entropy, optionally scaled by s.
func classifier(n, c, h, w int, weight float32, s *GradScaler) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", n, c, h, w)
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
		if !b.Training() {
			return nil, nil
		}
		loss, err := ops.CrossEntropy(logits, y, 0)
		if err != nil {
			return nil, err
		}
		if weight != 1 {
			if loss, err = G.Mul(loss, G.NewConstant(weight)); err != nil {
				return nil, err
			}
		}
		if s != nil {
			return s.ScaleLoss(b, loss)
		}
		return loss, nil
	}
}

func fillInputs(t testing.TB, p *nn.Program, seed int64, classes int) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	x, err := p.Input("images")
	if err != nil {
		t.Fatal(err)
	}
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y, err := p.Input("labels")
	if err != nil {
		t.Fatal(err)
	}
	for i := range y {
		y[i] = float32(rng.Intn(classes))
	}
}

// gradsOf runs one training step of m built with opts and returns a copy of the gradients.
func gradsOf(t *testing.T, m *nn.Model, build nn.BuildFunc, opts ...nn.BuildOption) []float32 {
	t.Helper()
	p, err := nn.Compile(m, build, append(opts, nn.WithPrivateBuffers())...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fillInputs(t, p, 5, 10)
	m.Params.ZeroGrad()
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), m.Params.Grad...)
}

// fp16 training of a loss with small gradients (weighted by 2^-18, as one term of a sum of
// many losses is) loses most gradients to underflow: the backward of the fp16 casts rounds
// gradients below 2^-25 to exact zeros. With the GradScaler's default scale 2^16 the same
// gradients survive, and after Unscale they match float32's to fp16 precision.
func TestFP16UnderflowWithoutScaler(t *testing.T) {
	m, err := nn.NewModel(convNet(), nn.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	const weight = 0x1p-18
	ref := gradsOf(t, m, classifier(8, 3, 8, 8, weight, nil))
	plain := gradsOf(t, m, classifier(8, 3, 8, 8, weight, nil), nn.WithAutocast(Autocast(FP16)))
	s, err := NewGradScaler()
	if err != nil {
		t.Fatal(err)
	}
	scaled := gradsOf(t, m, classifier(8, 3, 8, 8, weight, s), nn.WithAutocast(Autocast(FP16)))
	if s.Unscale(scaled) {
		t.Fatal("scaled fp16 gradients overflowed")
	}
	zeros := func(g []float32) (z, nonzeroRef int) {
		for i, v := range g {
			if ref[i] != 0 {
				nonzeroRef++
				if v == 0 {
					z++
				}
			}
		}
		return z, nonzeroRef
	}
	zp, n := zeros(plain)
	zs, _ := zeros(scaled)
	t.Logf("exact zeros where float32's gradient is not: fp16 %d of %d, fp16 + scaler %d; rel err fp16 %.3g, fp16 + scaler %.3g",
		zp, n, zs, relErr(plain, ref), relErr(scaled, ref))
	if zp < n/2 {
		t.Errorf("fp16 without scaler: only %d of %d gradients underflowed to zero, want most", zp, n)
	}
	if zs > n/100 {
		t.Errorf("fp16 with scaler: %d of %d gradients are zero, want under 1%%", zs, n)
	}
	if r := relErr(scaled, ref); r > 1e-2 {
		t.Errorf("fp16 with scaler: gradients %.3g relative from float32, want <= 1e-2", r)
	}
}

// logitsOf runs an eval program of m built with opts on fixed images.
func logitsOf(t *testing.T, m *nn.Model, n, h int, opts ...nn.BuildOption) []float32 {
	t.Helper()
	p, err := nn.Compile(m, classifier(n, 3, h, h, 1, nil), append(opts, nn.Training(false))...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x, err := p.Input("images")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(9))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := p.Output("logits")
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), out...)
}

// bf16 autocast logits are within 1e-2 (norm-wise relative) of float32's: bf16 keeps 8
// significant bits (relative rounding 2^-9 = 2e-3 per cast), and a few casts per layer add
// up to a few 1e-3. Scoping: with the head excluded the logits are no longer bf16 values.
func TestBF16LogitsCloseToFloat32(t *testing.T) {
	m, err := nn.NewModel(convNet(), nn.WithSeed(4))
	if err != nil {
		t.Fatal(err)
	}
	ref := logitsOf(t, m, 4, 8)
	tests := []struct {
		name      string
		policy    *Policy
		allBF16   bool
		identical bool
	}{
		{"all", Autocast(BF16), true, false},
		{"except fc", Autocast(BF16, Except("fc")), false, false},
		{"only fc", Autocast(BF16, Only("fc")), true, false},
		{"only missing module", Autocast(BF16, Only("head")), false, true},
	}
	for _, tc := range tests {
		got := logitsOf(t, m, 4, 8, nn.WithAutocast(tc.policy))
		r := relErr(got, ref)
		t.Logf("%s: rel err %.3g", tc.name, r)
		if r > 1e-2 || (r == 0) != tc.identical {
			t.Errorf("%s: logits %.3g relative from float32, want (0, 1e-2] (0 when autocast is off)", tc.name, r)
		}
		if all := allRepresentable(BF16, got); all != tc.allBF16 {
			t.Errorf("%s: all logits bf16 values = %v, want %v", tc.name, all, tc.allBF16)
		}
	}
}

func TestPolicyScoping(t *testing.T) {
	p := Autocast(BF16, Except("head", "layer4.1"), Only("layer4", "head"))
	tests := map[string]bool{
		"layer4.0.conv1": true, "layer4.1": false, "layer4.1.conv2": false, "layer4.10.conv1": true,
		"head": false, "head.fc": false, "header": false, "layer1.0.conv1": false, "": false,
	}
	for path, want := range tests {
		if got := p.Enabled(path); got != want {
			t.Errorf("Enabled(%q) = %v, want %v", path, got, want)
		}
	}
	if !Autocast(FP16).Enabled("anything") || Autocast(FP16).Format() != FP16 {
		t.Error("an unscoped policy is on everywhere")
	}
	// A node is rounded once however many ops read it, and a rounded node is not rounded again.
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 2, G.WithShape(2, 2), G.WithName("x"))
	q := Autocast(BF16)
	a, _ := q.CastInput(nil, "a", x)
	b, _ := q.CastInput(nil, "b", x)
	c, _ := q.CastOutput(nil, "c", a)
	if a != b || c != a || a == x {
		t.Error("casts are not shared")
	}
}

func allRepresentable(f Format, v []float32) bool {
	for _, x := range v {
		if Round32(f, x) != x {
			return false
		}
	}
	return true
}

func relErr(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d += e * e
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d) / math.Max(math.Sqrt(w), 1e-30)
}

// torchvision's resnet18 (models/resnet) at 64x64: bf16 autocast logits within 1e-2 of
// float32's, for the reason above.
func TestBF16ResNet18Logits(t *testing.T) {
	if testing.Short() {
		t.Skip("resnet18 forward twice: about a second")
	}
	net, err := resnet.ResNet18(10)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(net, nn.WithSeed(5))
	if err != nil {
		t.Fatal(err)
	}
	ref := logitsOf(t, m, 2, 64)
	got := logitsOf(t, m, 2, 64, nn.WithAutocast(Autocast(BF16)))
	r := relErr(got, ref)
	t.Logf("resnet18 bf16 logits: rel err %.3g", r)
	if r > 1e-2 || r == 0 {
		t.Fatalf("resnet18 bf16 logits %.3g relative from float32, want (0, 1e-2]", r)
	}
}
