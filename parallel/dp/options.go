package dp

import "github.com/gorgonia-parallel/gp/nn"

type config struct {
	backend   Backend
	devices   []Device
	gather    []string
	buildOpts []nn.BuildOption
	sumLoss   bool
	workers   int
}

// Option configures New.
type Option func(*config)

// WithDevices sets the host replicas' devices, CPUs; the first is the master. The default is
// one CPU device per GOMAXPROCS. A backend (WithBackend) has its own devices: New refuses a
// list that differs from them.
func WithDevices(devs ...Device) Option {
	return func(c *config) { c.devices = append([]Device(nil), devs...) }
}

// WithReplicas is WithDevices(CPUs(n)...).
func WithReplicas(n int) Option { return WithDevices(CPUs(n)...) }

// WithGather names the outputs (nn.Builder.Output) to gather on the master after each step,
// in batch order: Result.Outputs["logits"] is then [N, classes].
func WithGather(names ...string) Option {
	return func(c *config) { c.gather = append(c.gather, names...) }
}

// WithBuildOptions passes options to nn.Compile for every replica's programs, for example
// nn.Training(false) for evaluation, or parameter hooks. DataParallel adds its own
// nn.WithGradBuffer, nn.WithPrivateBuffers and gradient hook; do not pass those.
func WithBuildOptions(opts ...nn.BuildOption) Option {
	return func(c *config) { c.buildOpts = append(c.buildOpts, opts...) }
}

// WithSumLoss declares that the graph's loss is a sum over the chunk's samples, not a mean:
// losses and gradients are then summed with weight 1 instead of n_i/N.
func WithSumLoss() Option { return func(c *config) { c.sumLoss = true } }

// WithReduceWorkers sets how many goroutines of the host backend sum the gradients onto the
// master (default GOMAXPROCS). Each takes a contiguous range of the flat buffer, so the
// result does not depend on n. A device backend sums on the master device and refuses it.
func WithReduceWorkers(n int) Option { return func(c *config) { c.workers = n } }

// WithBackend runs the replicas on b (see Backend), for example on CUDA devices with
// dp.WithBackend(devdp.NewBackend(devs...)). The default is the host backend.
func WithBackend(b Backend) Option { return func(c *config) { c.backend = b } }

func newConfig(opts []Option) config {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	return c
}
