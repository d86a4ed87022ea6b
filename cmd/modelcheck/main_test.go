package main

import (
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

func TestModelcheck(t *testing.T) {
	dir := t.TempDir()
	mod, err := models.New("resnet18", 5)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(mod, nn.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	w := filepath.Join(dir, "w.npz")
	if err := models.SaveWeights(m.Params, w); err != nil {
		t.Fatal(err)
	}
	shape := []int{2, 3, 32, 32}
	x := make([]float32, 2*3*32*32)
	rng := rand.New(rand.NewSource(1))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	xp, yp := filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")
	if err := checkpoint.SaveArray(xp, nn.StateEntry{Shape: shape, F32: x}); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.SaveArray(yp, nn.StateEntry{Shape: []int{2}, F32: []float32{1, 4}}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		args  []string
		files []string
		err   string
	}{
		{"eval logits", []string{"-arch", "resnet18", "-num-classes", "5", "-weights", w, "-input", xp}, []string{"logits.npy"}, ""},
		{"train with labels", []string{"-arch", "resnet18", "-num-classes", "5", "-weights", w, "-input", xp, "-labels", yp, "-train"},
			[]string{"logits.npy", "loss.npy", "grads.npz", "buffers.npz"}, ""},
		{"wrong head", []string{"-arch", "resnet18", "-weights", w, "-input", xp}, nil, "fc.weight: got [5 512], want [1000 512]"},
		{"unknown arch", []string{"-arch", "vgg16", "-input", xp}, nil, "unknown architecture"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, "out", string(rune('a'+i)))
			err := run(append(c.args, "-out", out), io.Discard)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range c.files {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Fatal(err)
				}
			}
			logits, ls, err := readNpy(filepath.Join(out, "logits.npy"))
			if err != nil || len(ls) != 2 || ls[0] != 2 || ls[1] != 5 || len(logits) != 10 {
				t.Fatalf("logits.npy: shape %v, %d values, %v", ls, len(logits), err)
			}
			if len(c.files) > 1 {
				g, err := checkpoint.Load(filepath.Join(out, "grads.npz"))
				if err != nil || len(g) != len(m.Params.Params) {
					t.Fatalf("grads.npz: %d entries, want %d (%v)", len(g), len(m.Params.Params), err)
				}
			}
		})
	}
}
