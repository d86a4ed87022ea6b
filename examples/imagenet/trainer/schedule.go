package trainer

import "github.com/gorgonia-parallel/gp/optim"

// newSchedule builds the per-step learning-rate schedule: an optional linear warmup from 1%
// of the learning rate over cfg.Warmup epochs, then step decay (x0.1 every 30 epochs, as
// PyTorch's ImageNet example) or cosine annealing to zero at the last step.
func newSchedule(opt optim.Optimizer, cfg *Config, stepsPerEpoch int) (optim.Scheduler, error) {
	total := cfg.Epochs * stepsPerEpoch
	warm := cfg.Warmup * stepsPerEpoch
	var main optim.Scheduler
	var err error
	switch cfg.Sched {
	case "cosine":
		main, err = optim.NewCosineAnnealingLR(opt, max(1, total-warm), 0)
	default:
		main, err = optim.NewStepLR(opt, 30*stepsPerEpoch, 0.1)
	}
	if err != nil || warm == 0 {
		return main, err
	}
	w, err := optim.NewLinearLR(opt, 0.01, 1, warm)
	if err != nil {
		return nil, err
	}
	return optim.NewSequentialLR(opt, []optim.Scheduler{w, main}, []int{warm})
}
