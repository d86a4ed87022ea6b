package amp_test

import (
	"context"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The convnet of these tests, in gorgonia's own ops (plainNet) and in nn's modules (nnNet):
// conv 3x3 3->8, ReLU, max pool 2, conv 3x3 8->8, ReLU, max pool 2, flatten, product with
// a [32, 10] matrix (nn.Linear without bias), mean cross-entropy, on 8 images of 3x8x8.
const netN, netClasses, netFeat = 8, 10, 32

// Every input and weight is a small multiple of a power of two (images k/16, |k| <= 15;
// conv weights k/16, |k| <= 8; head weights k/8, |k| <= 4), so that every sum in the two
// convolutions and the head is exact in float32, in whatever order a kernel adds it: the
// first convolution's terms are multiples of 2^-8 and its sums below 13 (at most 12
// significant bits), the second's multiples of 2^-12 below 2^9 (21 bits); rounding to bf16
// keeps those multiples. The head's terms are multiples of 2^-15; its sums stay below 2^9
// for this data (24 bits), which the test checks through its float32 comparison.
// gorgonia's im2col + GEMM and nn's convolution then compute the same float32 values bit
// for bit, with autocast or without, and the two models can differ only where they round.
func netValue(rng *rand.Rand, k, den int, shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.Intn(2*k+1)-k) / float32(den)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// plainNet is the convnet as a gorgonia program: its learnables created in the build
// function and adopted with b.Learnable. handMark wraps each product in b.Autocast and
// b.AutocastOutput, as a user had to before Compile autocast gorgonia's ops.
func plainNet(handMark bool) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", netN, 3, 8, 8)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("labels", netN)
		if err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewSource(7))
		learn := func(name string, v *tensor.Dense) (*G.Node, error) {
			w := G.NewTensor(b.Graph, tensor.Float32, v.Dims(), G.WithShape(v.Shape()...), G.WithName(name), G.WithValue(v))
			return b.Learnable(w)
		}
		w1, err := learn("conv1", netValue(rng, 8, 16, 8, 3, 3, 3))
		if err != nil {
			return nil, err
		}
		w2, err := learn("conv2", netValue(rng, 8, 16, 8, 8, 3, 3))
		if err != nil {
			return nil, err
		}
		fc, err := learn("fc", netValue(rng, 4, 8, netFeat, netClasses))
		if err != nil {
			return nil, err
		}
		mark := func(path string, op func(in []*G.Node) (*G.Node, error), in ...*G.Node) (*G.Node, error) {
			if !handMark {
				return op(in)
			}
			c, err := b.Autocast(path, in...)
			if err != nil {
				return nil, err
			}
			out, err := op(c)
			if err != nil {
				return nil, err
			}
			return b.AutocastOutput(path, out)
		}
		conv := func(in []*G.Node) (*G.Node, error) {
			return G.Conv2d(in[0], in[1], tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1})
		}
		block := func(path string, h, w *G.Node) (*G.Node, error) {
			c, err := mark(path, conv, h, w)
			if err != nil {
				return nil, err
			}
			r, err := G.Rectify(c)
			if err != nil {
				return nil, err
			}
			return G.MaxPool2D(r, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2})
		}
		h, err := block("conv1", x, w1)
		if err != nil {
			return nil, err
		}
		if h, err = block("conv2", h, w2); err != nil {
			return nil, err
		}
		if h, err = G.Reshape(h, tensor.Shape{netN, netFeat}); err != nil {
			return nil, err
		}
		mul := func(in []*G.Node) (*G.Node, error) { return G.Mul(in[0], in[1]) }
		logits, err := mark("fc", mul, h, fc)
		if err != nil {
			return nil, err
		}
		b.Output("logits", logits)
		return ops.CrossEntropy(logits, y, 0)
	}
}

// nnNet is the same convnet in nn's modules, with the plain model's weights.
func nnNet(t *testing.T, plain *nn.Model) *nn.Model {
	t.Helper()
	conv := func(in int) *nn.Conv2d {
		return &nn.Conv2d{In: in, Out: 8, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}}
	}
	pool := func() *nn.MaxPool2d { return &nn.MaxPool2d{Kernel: [2]int{2, 2}} }
	net := &nn.Sequential{
		Names: []string{"conv1", "relu1", "pool1", "conv2", "relu2", "pool2", "flat", "fc"},
		Layers: []nn.Module{conv(3), &nn.ReLU{}, pool(), conv(8), &nn.ReLU{}, pool(), &nn.Flatten{},
			&nn.Linear{In: netFeat, Out: netClasses, NoBias: true}},
	}
	m, err := nn.NewModel(net, nn.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Params.Param("conv1.weight").Data, plain.Params.Param("conv1").Data)
	copy(m.Params.Param("conv2.weight").Data, plain.Params.Param("conv2").Data)
	src, dst := plain.Params.Param("fc").Data, m.Params.Param("fc.weight").Data // [32, 10] -> [10, 32]
	for i := range netFeat {
		for j := range netClasses {
			dst[j*netFeat+i] = src[i*netClasses+j]
		}
	}
	return m
}

func nnNetBuild(b *nn.Builder) (*G.Node, error) {
	x, err := b.Input("images", netN, 3, 8, 8)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("labels", netN)
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

// netRun is one forward and backward of a compiled convnet on the fixed batch.
type netRun struct {
	loss   float32
	logits []float32
	grad   []float32 // the gradient, in the plain model's layout (the head [32, 10])
	rounds int       // amp.Round nodes in the forward (the casts)
}

func runNet(t *testing.T, m *nn.Model, build nn.BuildFunc, opts ...nn.BuildOption) netRun {
	t.Helper()
	p, err := nn.Compile(m, build, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rng := rand.New(rand.NewSource(3))
	x, _ := p.Input("images")
	copy(x, netValue(rng, 15, 16, len(x)).Data().([]float32))
	y, _ := p.Input("labels")
	for i := range y {
		y[i] = float32(rng.Intn(netClasses))
	}
	m.Params.ZeroGrad()
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var r netRun
	r.grad = append([]float32(nil), m.Params.Grad...)
	if fc := m.Params.Param("fc.weight"); fc != nil { // nn's head is [10, 32]
		for i := range netFeat {
			for j := range netClasses {
				r.grad[fc.Offset+i*netClasses+j] = fc.Grad[j*netFeat+i]
			}
		}
	}
	if r.loss, err = p.LossValue(); err != nil {
		t.Fatal(err)
	}
	logits, err := p.Output("logits")
	if err != nil {
		t.Fatal(err)
	}
	r.logits = append([]float32(nil), logits...)
	r.rounds = castsIn(p, p.Loss, p.OutputNode("logits"))
	return r
}

// castsIn counts the amp.Round nodes that roots need in p's graph.
func castsIn(p *nn.Program, roots ...*G.Node) int {
	seen := map[*G.Node]bool{}
	casts := 0
	for stack := append(G.Nodes(nil), roots...); len(stack) > 0; {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[n] {
			continue
		}
		seen[n] = true
		if d, ok := amp.DescribeOp(n.Op()); ok && d.Round {
			casts++
		}
		for it := p.Graph().From(n.ID()); it.Next(); {
			stack = append(stack, it.Node().(*G.Node))
		}
	}
	return casts
}

// Under bf16 autocast, a plain gorgonia convnet (G.Conv2d, G.MaxPool2D, G.Mul) computes
// what the same convnet in nn's modules computes under the same policy, bit for bit, with
// the same nine casts (the input, weight and output of each convolution and of the head);
// written by hand with b.Autocast/b.AutocastOutput it is the same graph again (nothing cast
// twice). The bit-for-bit claim is the exact data's (netValue): with every float32 sum
// exact, the models can differ only in what they round, so the tolerance is zero.
//
// The gradients agree too, to float32's rounding (the backward's sums are not all exact;
// asserted at most 2^-20 of the largest gradient, measured equal): G.Conv2d's input is cast
// before im2col, as nn's Conv2d casts it, so x's gradient is rounded once after im2col's
// backward sums it. Cast after im2col, each of its 9 terms would be rounded (measured: the
// gradients then differ by 1.6e-3 of the largest, about what bf16 moves them from float32).
//
// Against float32, the bf16 loss differs by a bf16-sized amount, asserted in (2^-16, 2^-6]
// relative. The lower end is beyond float32's reach here: the sums are exact, so float32
// rounds only in the cross-entropy's exp and log (unit roundoff 2^-24), and a difference
// above 2^-16 says autocast really rounded. The upper end is eight bf16 unit roundoffs
// (2^-9 each): the logits pass six roundings to bf16 (the convolutions' outputs, the
// head's inputs and output; the images and weights are exact in bf16), whose errors of
// either sign mostly cancel in sums of 27 to 72 products (measured: 0.36 of one unit
// roundoff, 7.1e-4 relative); a difference beyond eight would mean the casts are not
// bf16's rounding (a cast to fewer bits, or one applied twice to different values).
func TestAutocastPlainGorgoniaConvNet(t *testing.T) {
	plain, err := nn.NewGraphModel(plainNet(false))
	if err != nil {
		t.Fatal(err)
	}
	modules := nnNet(t, plain)
	bf16 := func() nn.BuildOption { return nn.WithAutocast(amp.Autocast(amp.BF16)) }

	fp32Plain := runNet(t, plain, plainNet(false))
	fp32NN := runNet(t, modules, nnNetBuild)
	if fp32Plain.loss != fp32NN.loss || !equal32(fp32Plain.logits, fp32NN.logits) {
		t.Fatalf("float32: plain loss %v, nn %v: the models differ before autocast (or the exact-data premise fails)", fp32Plain.loss, fp32NN.loss)
	}
	if fp32Plain.rounds != 0 {
		t.Fatalf("without autocast the plain graph has %d casts, want 0", fp32Plain.rounds)
	}

	bfPlain := runNet(t, plain, plainNet(false), bf16())
	bfNN := runNet(t, modules, nnNetBuild, bf16())
	bfHand := runNet(t, plain, plainNet(true), bf16())
	t.Logf("loss: float32 %v, bf16 plain %v, bf16 nn %v, bf16 by hand %v; casts %d / %d / %d",
		fp32Plain.loss, bfPlain.loss, bfNN.loss, bfHand.loss, bfPlain.rounds, bfNN.rounds, bfHand.rounds)
	if bfPlain.loss != bfNN.loss || !equal32(bfPlain.logits, bfNN.logits) {
		t.Errorf("bf16: plain loss %v, nn modules %v: want equal bit for bit", bfPlain.loss, bfNN.loss)
	}
	if bfHand.loss != bfPlain.loss || !equal32(bfHand.logits, bfPlain.logits) {
		t.Errorf("bf16: marked by hand %v, automatic %v: want equal bit for bit", bfHand.loss, bfPlain.loss)
	}
	if bfPlain.rounds != 9 || bfNN.rounds != 9 || bfHand.rounds != 9 {
		t.Errorf("casts in the forward: plain %d, nn %d, by hand %d; want 9 each", bfPlain.rounds, bfNN.rounds, bfHand.rounds)
	}
	rel := math.Abs(float64(bfPlain.loss-fp32Plain.loss)) / math.Abs(float64(fp32Plain.loss))
	t.Logf("bf16 against float32: loss %.3g relative, largest logit difference %.3g (logits up to %.3g)",
		rel, maxDiff(bfPlain.logits, fp32Plain.logits), maxAbs(fp32Plain.logits))
	gradRel := maxDiff(bfPlain.grad, bfNN.grad) / maxAbs(bfNN.grad)
	t.Logf("gradients, largest difference relative to the largest gradient: plain-nn float32 %.3g, bf16 %.3g; bf16-float32 %.3g",
		maxDiff(fp32Plain.grad, fp32NN.grad)/maxAbs(fp32NN.grad), gradRel, maxDiff(bfNN.grad, fp32NN.grad)/maxAbs(fp32NN.grad))
	if gradRel > 0x1p-20 {
		t.Errorf("bf16 gradients: plain and nn differ by %.3g of the largest, want float32 rounding (at most 2^-20)", gradRel)
	}
	if rel <= 0x1p-16 || rel > 0x1p-6 {
		t.Errorf("bf16 loss %v against float32 %v: %.3g relative, want in (2^-16, 2^-6]", bfPlain.loss, fp32Plain.loss, rel)
	}
}

func equal32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func maxAbs(a []float32) float64 {
	m := 0.0
	for _, v := range a {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// Training the plain convnet under bf16 autocast with a gorgonia solver: the gradients
// reach every learnable through the casts (each weight changes at the first step) and the
// loss on a fixed batch goes down over five steps.
func TestAutocastPlainGorgoniaTrains(t *testing.T) {
	m, err := nn.NewGraphModel(plainNet(false))
	if err != nil {
		t.Fatal(err)
	}
	p, err := nn.Compile(m, plainNet(false), nn.WithAutocast(amp.Autocast(amp.BF16)),
		nn.WithSolver(G.NewVanillaSolver(G.WithLearnRate(0.05))))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rng := rand.New(rand.NewSource(3))
	x, _ := p.Input("images")
	copy(x, netValue(rng, 15, 16, len(x)).Data().([]float32))
	y, _ := p.Input("labels")
	for i := range y {
		y[i] = float32(rng.Intn(netClasses))
	}
	before := append([]float32(nil), m.Params.Data...)
	ctx := context.Background()
	var losses []float32
	for step := range 5 {
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := p.LossValue()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
		if err := p.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			for _, prm := range m.Params.Params {
				if equal32(prm.Data, before[prm.Offset:prm.Offset+len(prm.Data)]) {
					t.Errorf("learnable %s did not change at the first step", prm.Name)
				}
			}
		}
	}
	t.Logf("losses %v", losses)
	if !(losses[4] < losses[0]) {
		t.Errorf("losses %v: want the fifth below the first", losses)
	}
}

// Under autocast, a product gorgonia returns as a scalar (G.Mul of two vectors) cannot be
// rounded: Compile refuses the graph, naming the op and the call that marks it by hand;
// marked so (its inputs cast with b.Autocast), the graph compiles and runs.
func TestAutocastRefusesScalarProduct(t *testing.T) {
	build := func(hand bool) nn.BuildFunc {
		return func(b *nn.Builder) (*G.Node, error) {
			x, err := b.Input("x", 4)
			if err != nil {
				return nil, err
			}
			w, err := b.Learnable(G.NewVector(b.Graph, tensor.Float32, G.WithShape(4), G.WithName("w"),
				G.WithValue(tensor.New(tensor.WithBacking([]float32{0.5, -0.25, 1, 2})))))
			if err != nil {
				return nil, err
			}
			in := []*G.Node{x, w}
			if hand {
				if in, err = b.Autocast("dot", x, w); err != nil {
					return nil, err
				}
			}
			d, err := G.Mul(in[0], in[1])
			if err != nil {
				return nil, err
			}
			return G.Square(d)
		}
	}
	m, err := nn.NewGraphModel(build(false))
	if err != nil {
		t.Fatal(err)
	}
	_, err = nn.Compile(m, build(false), nn.WithAutocast(amp.Autocast(amp.BF16)))
	if err == nil {
		t.Fatal("Compile accepted a vector dot under autocast")
	}
	t.Logf("refusal: %v", err)
	for _, want := range []string{"a ⋅ b", "scalar", "b.Autocast("} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	// Off at the graph's root, the policy casts none of gorgonia's ops: nothing to refuse.
	if p, err := nn.Compile(m, build(false), nn.WithAutocast(amp.Autocast(amp.BF16, amp.Only("head")))); err != nil {
		t.Errorf("under Only(head): %v", err)
	} else {
		p.Close()
	}
	p, err := nn.Compile(m, build(true), nn.WithAutocast(amp.Autocast(amp.BF16)))
	if err != nil {
		t.Fatalf("marked by hand: %v", err)
	}
	defer p.Close()
	x, _ := p.Input("x")
	copy(x, []float32{1.00390625, 1, 1, 1}) // 1 + 2^-8 rounds to 1 in bf16
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := p.LossValue()
	if want := float32(3.25 * 3.25); got != want {
		t.Errorf("loss %v, want %v (the dot of the rounded inputs, squared)", got, want)
	}
}

// The policy's scoping reaches gorgonia's ops as ops at the graph's root (path ""): a
// module autocast turns off (Except) is not cast by the rewrite either, and Only(...)
// leaves gorgonia's ops in float32. Counted: the casts in the forward (three per
// convolution or head that autocast computes in bf16).
func TestAutocastGraphScoping(t *testing.T) {
	plain, err := nn.NewGraphModel(plainNet(false))
	if err != nil {
		t.Fatal(err)
	}
	modules := nnNet(t, plain)
	for _, tc := range []struct {
		name   string
		m      *nn.Model
		build  nn.BuildFunc
		policy *amp.Policy
		casts  int
	}{
		{"modules, Except(fc)", modules, nnNetBuild, amp.Autocast(amp.BF16, amp.Except("fc")), 6},
		{"modules, Only(conv2)", modules, nnNetBuild, amp.Autocast(amp.BF16, amp.Only("conv2")), 3},
		{"plain, Except(fc)", plain, plainNet(false), amp.Autocast(amp.BF16, amp.Except("fc")), 9},
		{"plain, Only(conv2)", plain, plainNet(false), amp.Autocast(amp.BF16, amp.Only("conv2")), 0},
		{"plain by hand, Only(conv2)", plain, plainNet(true), amp.Autocast(amp.BF16, amp.Only("conv2")), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runNet(t, tc.m, tc.build, nn.WithAutocast(tc.policy)).rounds; got != tc.casts {
				t.Errorf("%d casts in the forward, want %d", got, tc.casts)
			}
		})
	}
}
