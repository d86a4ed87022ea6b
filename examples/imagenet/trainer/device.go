package trainer

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/train"
)

// -device: cpu runs the graphs with gorgonia's TapeMachine (nn.Compile); cuda runs the same
// graphs on a GPU with cuda/tape (docs/DESIGN.md §9), the parameters, gradients and
// optimizer staying in host memory for now. The device is opened while the flags are
// checked, before the group is joined or any data is read, so that a machine without the
// driver (or cuBLAS) fails at once, naming the library.

// openDevice parses c.Device and opens the GPU it names.
func (c *Config) openDevice() error {
	if c.dev != nil {
		return nil
	}
	dev := c.Device
	if dev == "" || dev == "cpu" {
		return nil
	}
	if dev != "cuda" && !strings.HasPrefix(dev, "cuda:") {
		return fmt.Errorf("trainer: unknown -device %q (cpu, cuda or cuda:N)", dev)
	}
	switch c.Strategy {
	case "", "ddp", "none":
	default:
		return fmt.Errorf("trainer: -strategy %s is not yet on the device (issue 20, item 2): use -strategy none or ddp at world size 1 with -device %s", c.Strategy, dev)
	}
	ordinal, err := deviceOrdinal(dev)
	if err != nil {
		return err
	}
	d, err := cuda.Open(ordinal)
	if err != nil {
		return fmt.Errorf("trainer: -device %s: %w", dev, err)
	}
	c.dev = d
	return nil
}

// deviceOrdinal is N of cuda:N, or for cuda this rank's GPU as torchrun users pick it:
// LOCAL_RANK (0 without it), unless CUDA_VISIBLE_DEVICES shows this process a single GPU
// (a launcher that gives each rank its own), which is then ordinal 0.
func deviceOrdinal(dev string) (int, error) {
	if n, ok := strings.CutPrefix(dev, "cuda:"); ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("trainer: -device %s: want cuda:N with N a device ordinal", dev)
		}
		return v, nil
	}
	if vis, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok && vis != "" && !strings.Contains(vis, ",") {
		return 0, nil
	}
	lr := os.Getenv("LOCAL_RANK")
	if lr == "" {
		return 0, nil
	}
	v, err := strconv.Atoi(lr)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("trainer: -device cuda: LOCAL_RANK %q is not a local rank", lr)
	}
	return v, nil
}

// compileOn compiles a replicated engine's program on the device when there is one: at world
// size 1 nothing is reduced, so the program is the model's own, compiled by cuda/tape with
// the same options. DDP over several ranks on the device is issue 20's item 2.
func compileOn(cfg *Config, world int, m *nn.Model, build nn.BuildFunc, opts []nn.BuildOption) (train.Program, error) {
	if world > 1 {
		return nil, fmt.Errorf("trainer: -strategy %s at world size %d is not yet on the device (issue 20, item 2): run one process, or -device cpu", cfg.Strategy, world)
	}
	return tape.Compile(cfg.dev, m, build, opts...)
}
