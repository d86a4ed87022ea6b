package trainer

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/optim"
)

// newSchedule builds the per-step learning-rate schedule: an optional linear warmup over
// cfg.Warmup epochs from cfg.WarmupLR (timm's --warmup-lr; the recipe's 1% of the learning
// rate by default) to the learning rate, then step decay (x0.1 every 30 epochs, as PyTorch's
// ImageNet example), cosine annealing to cfg.MinLR (timm's --min-lr) at the last step,
// polynomial decay to 0 (PolynomialLR with cfg.PolyPower) or the rate held (ConstantLR);
// or PyTorch's OneCycleLR over every step, peaking at the learning rate.
func newSchedule(opt optim.Optimizer, cfg *settings, stepsPerEpoch int) (optim.Scheduler, error) {
	total := cfg.Epochs * stepsPerEpoch
	warm := cfg.Warmup * stepsPerEpoch
	var main optim.Scheduler
	var err error
	switch cfg.Sched {
	case "cosine":
		main, err = optim.NewCosineAnnealingLR(opt, max(1, total-warm), cfg.MinLR)
	case "poly":
		main, err = optim.NewPolynomialLR(opt, max(1, total-warm), cfg.PolyPower)
	case "constant":
		main, err = optim.NewConstantLR(opt, 1, 0)
	case "onecycle":
		s, err := optim.NewOneCycleLR(opt, cfg.LR, max(1, total), optim.OneCycle{PctStart: cfg.PctStart})
		if err != nil {
			return nil, fmt.Errorf("trainer: -sched onecycle: %w", err)
		}
		return s, nil
	default:
		main, err = optim.NewStepLR(opt, 30*stepsPerEpoch, 0.1)
	}
	if err != nil || warm == 0 {
		return main, err
	}
	start := 0.01
	if cfg.WarmupLR > 0 && cfg.LR > 0 {
		start = cfg.WarmupLR / cfg.LR
	}
	w, err := optim.NewLinearLR(opt, start, 1, warm)
	if err != nil {
		return nil, err
	}
	return optim.NewSequentialLR(opt, []optim.Scheduler{w, main}, []int{warm})
}
