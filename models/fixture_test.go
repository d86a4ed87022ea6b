package models_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// Reduced models of the fixtures written by testdata/make_model_fixtures.py.
func smallResNetBasic() (nn.Module, error) {
	return resnet.New(resnet.Config{Block: resnet.Basic, Layers: [4]int{2, 1, 1, 1}, Widths: [4]int{8, 16, 16, 32}, StemWidth: 8, NumClasses: 5})
}

func smallResNetBottleneck() (nn.Module, error) {
	return resnet.New(resnet.Config{Block: resnet.Bottleneck, Layers: [4]int{1, 2, 1, 1}, Widths: [4]int{4, 8, 8, 16}, StemWidth: 8, NumClasses: 5})
}

func smallSwin() (nn.Module, error) {
	return swin.New(swin.Config{EmbedDim: 12, Depths: []int{2, 2, 2}, Heads: []int{2, 2, 4}, NumClasses: 5})
}

// Tolerances, float32 against PyTorch's float32: logits norm-wise relative 1e-4,
// loss relative 1e-5, each parameter gradient norm-wise relative 1e-3 (accumulation order
// differs in long reductions), BatchNorm buffers norm-wise relative 1e-5.
const (
	tolLogits = 1e-4
	tolLoss   = 1e-5
	tolGrad   = 1e-3
	tolBuffer = 1e-5
)

func TestMatchesTorchvision(t *testing.T) {
	cases := []struct {
		name, weights string
		build         func() (nn.Module, error)
	}{
		{"resnet_basic", "resnet_basic", smallResNetBasic},
		{"resnet_bottleneck", "resnet_bottleneck", smallResNetBottleneck},
		{"swin_square", "swin", smallSwin},
		{"swin_padded", "swin", smallSwin},
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
			if err := models.LoadWeights(m.Params, "testdata/"+c.weights+"_weights.npz"); err != nil {
				t.Fatal(err)
			}
			want := loadExpect(t, "testdata/"+c.name+"_expect.npz")
			x, y := want["x"], want["y"]
			for _, mode := range []struct {
				train  bool
				prefix string
			}{{true, ""}, {false, "eval_"}} {
				got, err := models.Run(m, x.F32, x.Shape, y.F32, mode.train)
				if err != nil {
					t.Fatal(err)
				}
				check := func(what string, got, want []float32, tol float64) {
					t.Helper()
					if r := relNorm(got, want); !(r <= tol) {
						t.Errorf("%s %s: norm-wise relative error %.3g > %g", mode.prefix+"mode", what, r, tol)
					}
				}
				check("logits", got.Logits, want[mode.prefix+"logits"].F32, tolLogits)
				check("loss", []float32{got.Loss}, want[mode.prefix+"loss"].F32, tolLoss)
				gradKey := "grad/"
				if !mode.train {
					gradKey = "eval_grad/"
				}
				for _, g := range got.Grads {
					w, ok := want[gradKey+g.Name]
					if !ok {
						t.Fatalf("fixture lacks %s%s", gradKey, g.Name)
					}
					check("gradient of "+g.Name, g.F32, w.F32, tolGrad)
				}
				if !mode.train {
					continue
				}
				for _, b := range got.Buffers {
					w, ok := want["buf/"+b.Name]
					if strings.HasSuffix(b.Name, "relative_position_index") {
						continue
					}
					if !ok {
						t.Fatalf("fixture lacks buffer %s", b.Name)
					}
					if b.I64 != nil {
						if b.I64[0] != w.I64[0] {
							t.Errorf("%s = %d, want %d", b.Name, b.I64[0], w.I64[0])
						}
						continue
					}
					check("buffer "+b.Name, b.F32, w.F32, tolBuffer)
				}
			}
		})
	}
}

func loadExpect(t *testing.T, path string) map[string]nn.StateEntry {
	t.Helper()
	entries, err := checkpoint.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]nn.StateEntry{}
	for _, e := range entries {
		m[e.Name] = e
	}
	return m
}

// relNorm is ||got-want|| / ||want|| (absolute when want is zero).
func relNorm(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, n float64
	for i := range got {
		e := float64(got[i]) - float64(want[i])
		d += e * e
		n += float64(want[i]) * float64(want[i])
	}
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}
