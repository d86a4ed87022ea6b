package trainer

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	G "gorgonia.org/gorgonia"
)

// stepper runs forward and backward on one batch and leaves the gradient of the global
// batch's mean loss in the model's gradient buffer; it returns the (unscaled by nothing:
// as the graph computed it) loss.
type stepper interface {
	step(ctx context.Context, b *data.Batch) (float32, error)
}

// newStepper builds the training strategy: DDP over the group (also for world 1), or
// DataParallel over cfg.DPReplicas replicas in this one process.
func newStepper(ctx context.Context, cfg *Config, d *ddp.DDP, m *nn.Model, local, c, h, w int, scaler *amp.GradScaler, opts []nn.BuildOption) (stepper, error) {
	switch cfg.Strategy {
	case "ddp", "none", "":
		p, err := d.Compile(buildFor(local, c, h, w, cfg.Smoothing, scaler), opts...)
		if err != nil {
			return nil, err
		}
		return &ddpStepper{p}, nil
	case "dp":
		if d.Size() != 1 {
			return nil, fmt.Errorf("trainer: -strategy dp runs in one process; launch it without gprun (world size is %d)", d.Size())
		}
		rep, err := dp.New(m, func(b *nn.Builder, n int) (*G.Node, error) {
			return buildFor(n, c, h, w, cfg.Smoothing, scaler)(b)
		}, dp.WithReplicas(cfg.DPReplicas), dp.WithBuildOptions(opts...))
		if err != nil {
			return nil, err
		}
		return &dpStepper{d: rep}, nil
	}
	return nil, fmt.Errorf("trainer: unknown -strategy %q (ddp, dp or none)", cfg.Strategy)
}

type ddpStepper struct{ p *ddp.Program }

func (s *ddpStepper) step(ctx context.Context, b *data.Batch) (float32, error) {
	if err := fill(s.p, b); err != nil {
		return 0, err
	}
	if err := s.p.Run(ctx); err != nil {
		return 0, err
	}
	return s.p.LossValue()
}

type dpStepper struct {
	d      *dp.DataParallel
	labels []float32
}

func (s *dpStepper) step(ctx context.Context, b *data.Batch) (float32, error) {
	if cap(s.labels) < b.N {
		s.labels = make([]float32, b.N)
	}
	y := s.labels[:b.N]
	for i := range y {
		y[i] = float32(b.Labels[i])
	}
	res, err := s.d.Step(ctx, dp.Batch{N: b.N, Inputs: map[string][]float32{
		"images": b.Images[:b.N*b.C*b.H*b.W], "labels": y,
	}})
	if err != nil {
		return 0, err
	}
	return res.Loss, nil
}
