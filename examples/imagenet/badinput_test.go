package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// A learning rate or weight decay that is negative, NaN or Inf is refused, naming the flag,
// as PyTorch's optimizers refuse it (a negative -lr trained with the recipe's before); an
// unknown -arch names every architecture there is.
func TestBadHyperparameterFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // each in the error
	}{
		{[]string{"-lr", "-1"}, []string{"-lr", "want a finite number >= 0"}},
		{[]string{"-learning-rate", "-0.1"}, []string{"-learning-rate", ">= 0"}},
		{[]string{"-lr", "NaN"}, []string{"-lr", ">= 0"}},
		{[]string{"-lr", "Inf"}, []string{"-lr", ">= 0"}},
		{[]string{"-wd", "-1"}, []string{"-wd", ">= 0"}},
		{[]string{"-weight-decay", "-1e-4"}, []string{"-weight-decay", ">= 0"}},
		{[]string{"-wd", "inf"}, []string{"-wd", ">= 0"}},
		{[]string{"-arch", "resnet19"}, append([]string{"-arch", `"resnet19"`}, models.Archs()...)},
		{[]string{"-arch", "vgg16"}, append([]string{"-arch", "swin_t", "resnet20", "swin_test"}, models.Archs()...)},
	} {
		_, err := parseConfig(t, tc.args...)
		if err == nil {
			t.Errorf("%v: accepted", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v: does not say %q", tc.args, err, w)
			}
		}
	}
	// 0 is a weight decay (none) and, for -lr, the recipe's.
	c, err := parseConfig(t, "-lr", "0", "-wd", "0", "-b", "256")
	if err != nil {
		t.Fatal(err)
	}
	if c.LR != 0.1 || c.WeightDecay != 0 {
		t.Errorf("-lr 0 -wd 0: lr %g wd %g, want the recipe's 0.1 and 0", c.LR, c.WeightDecay)
	}
	// Without the flags, the recipe's.
	if c, err = parseConfig(t, "-b", "256"); err != nil || c.WeightDecay != 1e-4 {
		t.Errorf("no -wd: wd %g (%v), want the recipe's 1e-4", c.WeightDecay, err)
	}
}

// A run directory's checkpoint of another architecture, or of another strategy, is refused
// at the start naming the file (and the flag to change), and the checkpoint stays.
func TestCheckpointOfAnotherModelOrStrategy(t *testing.T) {
	out := t.TempDir()
	cfg := tinyConfig(t, out)
	cfg.Arch, cfg.MaxSteps, cfg.Resume = "resnet8", 2, "none"
	runWorld(t, 1, cfg)
	saved := filepath.Join(out, "ckpt-000000002.npz")
	for _, tc := range []struct {
		arch, strategy string
		want           []string
	}{
		{"resnet14", "ddp", []string{saved, "-arch", "layer1.1.conv1.weight"}},
		{"resnet8", "zero3", []string{out, "ckpt-000000002.npz", "-strategy zero3"}},
	} {
		c := cfg
		c.Arch, c.Strategy, c.Resume = tc.arch, tc.strategy, "auto"
		c.Group = comm.NewLocalGroups(1)[0]
		_, err := Run(context.Background(), c, io.Discard)
		if err == nil {
			t.Errorf("%s %s: resumed from another model's checkpoint", tc.arch, tc.strategy)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: %v: does not say %q", tc.arch, tc.strategy, err, w)
			}
		}
		if _, err := os.Stat(saved); err != nil {
			t.Errorf("%s %s: the checkpoint is gone: %v", tc.arch, tc.strategy, err)
		}
	}
}

// A data set whose images do not fit the model's input (grey or 4-channel arrays for an RGB
// model) is refused at the start naming the file and what it needs.
func TestDataOfAnotherShape(t *testing.T) {
	for _, ch := range []int{1, 4} {
		dir := t.TempDir()
		for _, side := range []string{"train", "val"} {
			const n, size = 16, 12
			lab := make([]byte, 8*n)
			for i := range n {
				lab[8*i] = byte(i % 2)
			}
			writeNpyShape(t, filepath.Join(dir, side+"_images.npy"), "|u1", []int{n, size, size, ch}, make([]byte, n*size*size*ch))
			writeNpyShape(t, filepath.Join(dir, side+"_labels.npy"), "<i8", []int{n}, lab)
		}
		cfg := tinyConfig(t, t.TempDir())
		cfg.Data, cfg.DataFormat, cfg.Arch, cfg.ImageSize = dir, "npy", "resnet8", 12
		cfg.Group = comm.NewLocalGroups(1)[0]
		_, err := Run(context.Background(), cfg, io.Discard)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "train_images.npy")) || !strings.Contains(err.Error(), "3-channel") {
			t.Errorf("%d-channel images: %v, want an error naming train_images.npy and 3 channels", ch, err)
		}
	}
}

func TestBadInput(t *testing.T) {
	other := t.TempDir()
	mod, err := models.New("resnet34", 4)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(mod)
	if err != nil {
		t.Fatal(err)
	}
	wrongWeights := filepath.Join(other, "resnet34.npz")
	if err := models.SaveWeights(m.Params, wrongWeights); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"missing data folder", func(c *Config) { c.Data = filepath.Join(other, "nope") }, "nope"},
		{"pretrained of another architecture", func(c *Config) { c.Pretrained = wrongWeights }, "resnet34.npz"},
		{"batch not divisible", func(c *Config) { c.Batch = 7 }, "not divisible"},
		{"unknown arch", func(c *Config) { c.Arch = "vgg16" }, "vgg16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig(t, t.TempDir())
			tc.mut(&cfg)
			groups := comm.NewLocalGroups(2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					c := cfg
					c.Group = groups[r]
					_, errs[r] = Run(context.Background(), c, os.Stdout)
				}(r)
			}
			wg.Wait()
			if errs[0] == nil || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", errs[0], tc.want)
			}
		})
	}
}
