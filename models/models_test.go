package models_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// Every torchvision architecture declares torchvision 0.14.1's state-dict keys, in its order,
// with its shapes, and the same learnable parameter count (testdata/params_<arch>.txt, written by
// make_model_fixtures.py; swin_l built from torchvision's SwinTransformer class).
func TestNamesShapesCounts(t *testing.T) {
	for _, arch := range models.TorchvisionArchs() {
		t.Run(arch, func(t *testing.T) {
			wantCount, want := readParamList(t, "testdata/params_"+arch+".txt")
			mod, err := models.New(arch, 0)
			if err != nil {
				t.Fatal(err)
			}
			m, err := nn.NewModel(mod)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Params.NumParams(); got != wantCount {
				t.Errorf("%d parameters, torchvision has %d", got, wantCount)
			}
			var got []string
			for _, p := range m.Params.Params {
				got = append(got, fmt.Sprintf("param %s %v", p.Name, p.Shape))
			}
			for _, b := range m.Params.Buffers {
				got = append(got, fmt.Sprintf("buffer %s %v", b.Name, b.Shape))
			}
			gp, wp := filter(got, "param"), filter(want, "param")
			if strings.Join(gp, "\n") != strings.Join(wp, "\n") {
				t.Errorf("parameters differ from torchvision's: %s", firstDiff(gp, wp))
			}
			gb, wb := sorted(filter(got, "buffer")), sorted(filter(want, "buffer"))
			if strings.Join(gb, "\n") != strings.Join(wb, "\n") {
				t.Errorf("buffers differ from torchvision's: %s", firstDiff(gb, wb))
			}
		})
	}
}

func readParamList(t *testing.T, path string) (int, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var count int
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "# params "); ok {
			if count, err = strconv.Atoi(n); err != nil {
				t.Fatal(err)
			}
			continue
		}
		fs := strings.Fields(line)
		shape := "[]"
		if len(fs) == 3 {
			shape = "[" + strings.ReplaceAll(fs[2], ",", " ") + "]"
		}
		out = append(out, fs[0]+" "+fs[1]+" "+shape)
	}
	return count, out
}

func filter(s []string, prefix string) []string {
	var out []string
	for _, v := range s {
		if strings.HasPrefix(v, prefix+" ") {
			out = append(out, v)
		}
	}
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("entry %d: got %q, want %q", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("got %d entries, want %d", len(got), len(want))
}

// Bad inputs fail at build time with errors that name the layer and the shapes.
func TestBadInputs(t *testing.T) {
	cases := []struct {
		name    string
		build   func() (nn.Module, error)
		shape   []int
		train   bool
		weights string
		want    []string
	}{
		{"resnet wrong channels", smallResNetBasic, []int{2, 4, 32, 32}, false, "", []string{"conv1", "[2 4 32 32]"}},
		{"resnet too small", smallResNetBasic, []int{1, 3, 16, 16}, true, "", []string{"layer3.0.bn1", "[1 3 16 16]", "1x1"}},
		{"resnet empty map", smallResNetBasic, []int{2, 3, 32, 0}, false, "", []string{"conv1", "[2 3 32 0]"}},
		{"swin wrong channels", smallSwin, []int{2, 1, 32, 32}, false, "", []string{"features.0.0", "[2 1 32 32]"}},
		{"swin too small", smallSwin, []int{2, 3, 3, 32}, false, "", []string{"features.0.0", "[2 3 3 32]", "patch"}},
		{"swin weights into resnet", smallResNetBasic, nil, false, "testdata/swin_weights.npz", []string{"missing", "conv1.weight [8 3 7 7]", "unexpected", "features.0.0.weight"}},
		{"bottleneck weights into basic", smallResNetBasic, nil, false, "testdata/resnet_bottleneck_weights.npz", []string{"mis-shaped", "layer1.0.conv1.weight: got [4 8 1 1], want [8 8 3 3]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mod, err := c.build()
			if err != nil {
				t.Fatal(err)
			}
			m, err := nn.NewModel(mod)
			if err != nil {
				t.Fatal(err)
			}
			if c.weights != "" {
				err = models.LoadWeights(m.Params, c.weights)
				if !errors.Is(err, checkpoint.ErrMismatch) {
					t.Fatalf("got %v, want ErrMismatch", err)
				}
			} else {
				_, err = nn.Compile(m, func(b *nn.Builder) (*G.Node, error) {
					x, err := b.Input("images", c.shape...)
					if err != nil {
						return nil, err
					}
					return b.Forward(x)
				}, nn.Training(c.train))
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// resnet18 and swin_t (full width and depth, small inputs and few classes) drive the loss on
// one fixed batch close to zero with plain SGD with momentum.
func TestOverfitOneBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two full-width models")
	}
	cases := []struct {
		arch  string
		shape []int
		lr    float32
		steps int
	}{
		{"resnet18", []int{4, 3, 32, 32}, 0.05, 25},
		{"swin_t", []int{4, 3, 32, 32}, 0.002, 40},
	}
	for _, c := range cases {
		t.Run(c.arch, func(t *testing.T) {
			mod, err := models.New(c.arch, 4)
			if err != nil {
				t.Fatal(err)
			}
			if s, ok := mod.(*swin.Swin); ok {
				// No stochastic depth, so the loss on the fixed batch is deterministic.
				cfg := s.Config()
				cfg.StochasticDepth = 0
				if mod, err = swin.New(cfg); err != nil {
					t.Fatal(err)
				}
			}
			m, err := nn.NewModel(mod, nn.WithSeed(1))
			if err != nil {
				t.Fatal(err)
			}
			n := c.shape[0]
			p, err := nn.Compile(m, func(b *nn.Builder) (*G.Node, error) {
				x, err := b.Input("images", c.shape...)
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
				return ops.CrossEntropy(logits, y, 0)
			})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewSource(2))
			x, _ := p.Input("images")
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			y, _ := p.Input("labels")
			for i := range y {
				y[i] = float32(i % 4)
			}
			mom := make([]float32, len(m.Params.Data))
			var first, last float32
			for step := range c.steps {
				m.Params.ZeroGrad()
				if err := p.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				last, _ = p.LossValue()
				if step == 0 {
					first = last
				}
				if last < 0.01 {
					t.Logf("%s: loss %.4f -> %.4f in %d steps", c.arch, first, last, step+1)
					return
				}
				for i, g := range m.Params.Grad {
					mom[i] = 0.9*mom[i] + g
					m.Params.Data[i] -= c.lr * mom[i]
				}
			}
			t.Fatalf("loss %.4f -> %.4f after %d steps, want < 0.01", first, last, c.steps)
		})
	}
}

// Weights saved by SaveWeights load back into a fresh model with the same keys.
func TestSaveLoadRoundTrip(t *testing.T) {
	mod, err := smallResNetBottleneck()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := nn.NewModel(mod, nn.WithSeed(1))
	mod2, _ := smallResNetBottleneck()
	b, _ := nn.NewModel(mod2, nn.WithSeed(2))
	path := filepath.Join(t.TempDir(), "w.npz")
	if err := models.SaveWeights(a.Params, path); err != nil {
		t.Fatal(err)
	}
	if err := models.LoadWeights(b.Params, path); err != nil {
		t.Fatal(err)
	}
	for i := range a.Params.Data {
		if a.Params.Data[i] != b.Params.Data[i] {
			t.Fatalf("parameter value %d differs after a round trip", i)
		}
	}
}

// zero_init_residual starts the last BatchNorm weight of every block at zero.
func TestZeroInitResidual(t *testing.T) {
	for _, blk := range []resnet.BlockKind{resnet.Basic, resnet.Bottleneck} {
		c := resnet.Config{Block: blk, Layers: [4]int{1, 1, 1, 1}, ZeroInitResidual: true}
		mod, err := resnet.New(c)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := nn.NewModel(mod)
		last := "layer1.0.bn2.weight"
		if blk == resnet.Bottleneck {
			last = "layer1.0.bn3.weight"
		}
		for _, v := range m.Params.Param(last).Data {
			if v != 0 {
				t.Fatalf("%s not zero", last)
			}
		}
		if m.Params.Param("layer1.0.bn1.weight").Data[0] != 1 {
			t.Fatal("bn1 weight must start at one")
		}
	}
}

// Stochastic depth rises linearly from 0 to the configured rate over all blocks.
func TestSwinDropPathLinear(t *testing.T) {
	s, err := swin.SwinT(0)
	if err != nil {
		t.Fatal(err)
	}
	p := s.DropPathProbs()
	if len(p) != 12 || p[0] != 0 || p[11] != 0.2 || p[6] < 0.109 || p[6] > 0.110 {
		t.Fatalf("drop-path probabilities %v, want 0.2*k/11", p)
	}
}

// An unknown name is refused with every architecture New builds: torchvision's ResNets and
// Swins, the CIFAR ResNets and the test-sized Swin, whatever family the name looks like.
func TestUnknownArchListsEvery(t *testing.T) {
	for _, name := range []string{"resnet19", "swin_x", "vgg16", ""} {
		_, err := models.New(name, 10)
		if err == nil {
			t.Fatalf("New(%q) built a model", name)
		}
		for _, a := range models.Archs() {
			if !strings.Contains(err.Error(), a) {
				t.Errorf("New(%q): %v: does not name %s", name, err, a)
			}
		}
	}
}
