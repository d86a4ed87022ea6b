package trainer

import "github.com/gorgonia-parallel/gp/optim"

// newSchedule builds the per-step learning-rate schedule: an optional linear warmup over
// cfg.Warmup epochs from cfg.WarmupLR (timm's --warmup-lr; the recipe's 1% of the learning
// rate by default) to the learning rate, then step decay (x0.1 every 30 epochs, as PyTorch's
// ImageNet example) or cosine annealing to cfg.MinLR (timm's --min-lr) at the last step.
func newSchedule(opt optim.Optimizer, cfg *Config, stepsPerEpoch int) (optim.Scheduler, error) {
	total := cfg.Epochs * stepsPerEpoch
	warm := cfg.Warmup * stepsPerEpoch
	var main optim.Scheduler
	var err error
	switch cfg.Sched {
	case "cosine":
		main, err = optim.NewCosineAnnealingLR(opt, max(1, total-warm), cfg.MinLR)
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
