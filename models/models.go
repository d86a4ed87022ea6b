// Package models names the reference architectures (torchvision's ResNets and Swin
// Transformers; He et al.'s CIFAR ResNets for small images), builds them by name, imports
// and exports their weights as torchvision state dicts in .npz files, and runs them once on
// fixed inputs to compare with PyTorch.
//
// Weights exported from PyTorch with
//
//	numpy.savez(path, **{k: v.numpy() for k, v in model.state_dict().items()})
//
// load with LoadWeights; SaveWeights writes the same keys back.
package models

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// Archs lists every architecture New builds: torchvision's (TorchvisionArchs), the CIFAR
// ResNets of resnet.CIFARArchs, then the test-sized swin.TestArchs.
func Archs() []string {
	return append(append(TorchvisionArchs(), resnet.CIFARArchs...), swin.TestArchs...)
}

// TorchvisionArchs lists the architectures whose names, shapes and initialisation are
// torchvision's, so that torchvision state dicts load into them.
func TorchvisionArchs() []string {
	return append(append([]string(nil), resnet.Archs...), swin.Archs...)
}

// New returns the module of the named architecture ("resnet50", "swin_t") with numClasses
// outputs (0 means 1000; 10 for the CIFAR ResNets). Build it with nn.NewModel.
func New(arch string, numClasses int) (nn.Module, error) {
	switch {
	case resnet.IsCIFAR(arch):
		c, err := resnet.CIFARArch(arch, numClasses)
		if err != nil {
			return nil, err
		}
		return resnet.NewCIFAR(c)
	case slices.Contains(resnet.Archs, arch):
		c, err := resnet.Arch(arch, numClasses)
		if err != nil {
			return nil, err
		}
		return resnet.New(c)
	case slices.Contains(swin.Archs, arch) || slices.Contains(swin.TestArchs, arch):
		c, err := swin.Arch(arch, numClasses)
		if err != nil {
			return nil, err
		}
		return swin.New(c)
	}
	return nil, fmt.Errorf("models: unknown architecture %q: want one of %s, or another CIFAR ResNet resnet<6n+2>[_w<width>][_s2]",
		arch, strings.Join(Archs(), ", "))
}

// LoadWeights loads a torchvision state dict saved as .npz into ps, strictly: every key
// must exist with its shape, and nothing may be left over. The error of a mismatch (for
// example the weights of another architecture) names the first offending keys with their
// shapes; nothing is loaded then.
func LoadWeights(ps *nn.ParamSet, path string) error {
	entries, err := checkpoint.Load(path)
	if err != nil {
		return fmt.Errorf("models: %w", err)
	}
	rep, err := checkpoint.LoadModel(ps, entries)
	if errors.Is(err, checkpoint.ErrMismatch) {
		return fmt.Errorf("models: weights %s do not fit the model: %s: %w", path, summary(rep, ps), checkpoint.ErrMismatch)
	}
	if err != nil {
		return fmt.Errorf("models: weights %s: %w", path, err)
	}
	return nil
}

// SaveWeights writes ps's parameters and buffers to path as .npz with torchvision's keys
// (numpy.load(path) gives a dict that model.load_state_dict accepts after torch.from_numpy).
func SaveWeights(ps *nn.ParamSet, path string) error {
	if err := checkpoint.Save(path, ps.ModelState()); err != nil {
		return fmt.Errorf("models: %w", err)
	}
	return nil
}

// summary lists up to three keys of each kind of mismatch, with shapes.
func summary(rep nn.LoadReport, ps *nn.ParamSet) string {
	var parts []string
	add := func(what string, keys []string, shape func(string) string) {
		if len(keys) == 0 {
			return
		}
		shown := keys[:min(3, len(keys))]
		s := make([]string, len(shown))
		for i, k := range shown {
			s[i] = k + shape(k)
		}
		more := ""
		if len(keys) > len(shown) {
			more = fmt.Sprintf(", ... %d more", len(keys)-len(shown))
		}
		parts = append(parts, fmt.Sprintf("%d %s (%s%s)", len(keys), what, strings.Join(s, "; "), more))
	}
	none := func(string) string { return "" }
	want := func(k string) string {
		if p := ps.Param(k); p != nil {
			return fmt.Sprintf(" %v", p.Shape)
		}
		if b := ps.Buffer(k); b != nil {
			return fmt.Sprintf(" %v", b.Shape)
		}
		return ""
	}
	add("mis-shaped", rep.Mismatched, none)
	add("missing", rep.Missing, want)
	add("unexpected", rep.Unexpected, none)
	return strings.Join(parts, ", ")
}
