package trainer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/devddp"
	"github.com/gorgonia-parallel/gp/cuda/devdp"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
)

// -device: cpu runs the graphs with gorgonia's TapeMachine (nn.Compile); cuda runs the same
// graphs on a GPU with cuda/tape (docs/DESIGN.md §9), with the parameters, gradients and
// optimizer on the device and, under -strategy ddp at world size > 1, the buckets reduced
// there by NCCL; -strategy dp replicates over several devices of the process (compileOn);
// -strategy zero3 shards them over the ranks' devices (cuda/devzero, engine_zero.go). The device is opened while the flags are
// checked, before the group is joined or any data is read, so that a machine without the
// driver (or cuBLAS) fails at once, naming the library.

// openDevice parses c.Device and opens the GPU it names.
func (c *settings) openDevice() error {
	if c.dev != nil {
		return nil
	}
	dev := c.Device
	if dev == "" || dev == "cpu" {
		return nil
	}
	if dev != "cuda" && !strings.HasPrefix(dev, "cuda:") {
		return fmt.Errorf("trainer: unknown device %q (cpu, cuda or cuda:N)", dev)
	}
	switch c.Strategy {
	case "", "ddp", "none", "dp":
	case "zero3":
		if c.Offload == "disk" {
			return fmt.Errorf("trainer: offload disk with device %s is not supported on the device: use offload cpu, or none, there", dev)
		}
	default:
		return fmt.Errorf("trainer: strategy %s with device %s is not supported on the device: use ddp, none, dp or zero3 there", c.Strategy, dev)
	}
	ordinal, err := deviceOrdinal(dev)
	if err != nil {
		return err
	}
	d, err := cuda.Open(ordinal)
	if err != nil {
		return fmt.Errorf("trainer: device %s: %w", dev, err)
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

// compileOn compiles a replicated engine's training program on the device (the engine calls it
// for -device cuda instead of the strategy's compile): the parameters, gradients and optimizer
// live on the device (tape.State) and, at world size > 1 or under an explicit -strategy ddp,
// DDP's buckets are all-reduced there by NCCL while backward runs, each bucket stepped on the
// device after its reduction (the device backend newDDP gave d: cuda/devddp over an NCCL group
// on this rank's GPU, deviceGroup). The optimizer is the build options' nn.WithOptimizer on
// every path, as on the host. At world size 1 that is NCCL's event protocol over a group of
// one, what a one-GPU check exercises; -strategy none and the default skip it. What the stepper
// does between Run and Step (-amp fp16's unscale and inf/NaN check, -clip-grad,
// -grad-accum-steps' 1/A) works on the State's device gradients (stepper.update over
// deviceGrads), under every strategy here; -model-ema averages the host's weights, copied from
// the device after each optimizer step (replicated.update). -strategy dp runs cfg.DPReplicas
// replicas on the devices from cfg.dev's ordinal on (cuda/devdp; cfg.dev is the master). build
// makes the graph for a batch of n images (-amp fp16's scale is in it, its unscale in
// stepper.update). release, after the programs are closed, frees the device state, on the
// DDP path with the device backend that owns it (its events and pinned copies); nil under
// -strategy dp, whose program owns everything.
func compileOn(cfg *settings, d *ddp.DDP, g comm.Group, m *nn.Model, opt optim.Optimizer, buildN func(n int) nn.BuildFunc, opts []nn.BuildOption) (prog train.Program, st *tape.State, release func(), err error) {
	world := g.Size()
	build := buildN(cfg.Batch / world)
	if cfg.Strategy == "dp" {
		if world != 1 {
			return nil, nil, nil, fmt.Errorf("trainer: -strategy dp runs in one process; launch it without gprun (world size is %d)", world)
		}
		// The program's Close closes the DataParallel, its backend and their states.
		prog, st, err = compileDataParallel(cfg, m, opt, buildN, opts)
		return prog, st, nil, err
	}
	// The optimizer is the build options' on every path, as on the host.
	all := append(slices.Clone(opts), nn.WithOptimizer(opt))
	if be, ok := d.Backend().(*devddp.Backend); ok { // newDDP's, for deviceDDP
		if prog, err = d.Compile(build, all...); err != nil {
			be.Close()
			return nil, nil, nil, err
		}
		return prog, be.State(), be.Close, nil // the backend owns its state
	}
	if st, err = tape.NewState(cfg.dev, m); err != nil {
		return nil, nil, nil, fmt.Errorf("trainer: -device %s: %w", cfg.Device, err)
	}
	if prog, err = st.Compile(build, all...); err != nil {
		st.Close()
		return nil, nil, nil, err
	}
	return prog, st, st.Close, nil
}

// deviceDDP reports whether DDP runs on the device (compileOn): -device cuda at world size
// > 1 or under an explicit -strategy ddp, and not -strategy dp.
func deviceDDP(cfg *settings, g comm.Group) bool {
	return cfg.dev != nil && cfg.Strategy != "dp" && (g.Size() > 1 || cfg.Strategy == "ddp")
}

// newDDP is the replicated engine's ddp.New: for deviceDDP with the device backend
// (ddp.WithBackend of cuda/devddp over an NCCL group on this rank's GPU, deviceGroup), which
// ddp.New gives the device state of the model once rank 0's parameters are broadcast;
// otherwise over host memory.
func newDDP(ctx context.Context, cfg *settings, g comm.Group, m *nn.Model, opts []ddp.Option) (*ddp.DDP, error) {
	if !deviceDDP(cfg, g) {
		return ddp.New(ctx, m, g, opts...)
	}
	ng, err := deviceGroup(ctx, cfg, g, "trainer-ddp")
	if err != nil {
		return nil, err
	}
	// The run closes the backend (replicated.close); the NCCL group lives as long as the
	// process (deviceGroup).
	be := devddp.NewBackend(cfg.dev, ng)
	d, err := ddp.New(ctx, m, g, append(slices.Clone(opts), ddp.WithBackend(be))...)
	if err != nil {
		be.Close()
		return nil, fmt.Errorf("trainer: -device %s: %w", cfg.Device, err)
	}
	return d, nil
}

// deviceGroup makes the NCCL group of g's ranks on this rank's GPU, named name, exchanging
// NCCL's unique id through the launched job's rendezvous store or, for a group of one without
// a launcher (no store), through a store of one on loopback that is closed once the group is
// made (NCCL reads the store only to start). The group lives as long as the process: the
// trainer's Run is the process's run, and NCCL's (and the fake's) state is released at exit.
func deviceGroup(ctx context.Context, cfg *settings, g comm.Group, name string) (*nccl.Group, error) {
	st := comm.StoreOf(g)
	if st == nil {
		if g.Size() != 1 {
			return nil, fmt.Errorf("trainer: -device %s at world size %d needs the rendezvous store of a launched job (gprun or torchrun) to make its NCCL group", cfg.Device, g.Size())
		}
		srv, err := store.Listen("127.0.0.1:0", 1)
		if err != nil {
			return nil, fmt.Errorf("trainer: -device %s: the NCCL group's store of one: %w", cfg.Device, err)
		}
		defer srv.Close()
		if st, err = store.Dial(ctx, srv.Addr()); err != nil {
			return nil, fmt.Errorf("trainer: -device %s: the NCCL group's store of one: %w", cfg.Device, err)
		}
		defer st.Close()
	}
	nopts := []nccl.Option{nccl.WithDevice(cfg.dev.Ordinal()), nccl.WithName(name)}
	if cfg.Timeout > 0 {
		nopts = append(nopts, nccl.WithTimeout(cfg.Timeout))
	}
	ng, err := nccl.New(ctx, st, g.Rank(), g.Size(), nopts...)
	if err != nil {
		return nil, fmt.Errorf("trainer: -device %s: NCCL group: %w", cfg.Device, err)
	}
	return ng, nil
}

// compileDataParallel is -strategy dp on the device: cfg.DPReplicas replicas on the devices
// cfg.dev.Ordinal(), +1, ... of this process, the first the master (cuda/devdp). The replica
// devices stay open for the process's life, as cfg.dev does.
func compileDataParallel(cfg *settings, m *nn.Model, opt optim.Optimizer, buildN func(n int) nn.BuildFunc, opts []nn.BuildOption) (train.Program, *tape.State, error) {
	devs := []*cuda.Device{cfg.dev}
	closeExtra := func() { // the replicas' devices this function opened (cfg.dev is the caller's)
		for _, d := range devs[1:] {
			_ = d.Close()
		}
	}
	for i := 1; i < cfg.DPReplicas; i++ {
		d, err := cuda.Open(cfg.dev.Ordinal() + i)
		if err != nil {
			closeExtra()
			return nil, nil, fmt.Errorf("trainer: -strategy dp -dp-replicas %d -device %s: replica %d: %w", cfg.DPReplicas, cfg.Device, i, err)
		}
		devs = append(devs, d)
	}
	be := devdp.NewBackend(devs...)
	rep, err := dp.New(m, func(b *nn.Builder, n int) (*G.Node, error) { return buildN(n)(b) },
		dp.WithBackend(be), dp.WithBuildOptions(append(opts, nn.WithOptimizer(opt))...))
	if err != nil {
		_ = be.Close()
		closeExtra()
		return nil, nil, fmt.Errorf("trainer: -device %s: %w", cfg.Device, err)
	}
	p, err := rep.Program(cfg.Batch)
	if err != nil {
		rep.Close()
		closeExtra()
		return nil, nil, fmt.Errorf("trainer: -device %s: %w", cfg.Device, err)
	}
	return p, be.Master(), nil
}

// update is the stepper's update and, under -model-ema with the weights on the device, the
// copy of the weights to the host that the average reads (modelEMA.update folds
// ParamSet.Data in after each optimizer step): one device-to-host copy of the parameters
// per step. The host's weights are then current, and hold the average while it is
// evaluated, so evaluation reads them (evalLogits).
func (r *replicated) update(ctx context.Context) error {
	if err := r.stepper.update(ctx); err != nil {
		return err
	}
	if r.ema != nil && r.dst != nil {
		if err := r.dst.ParamsToHost(ctx); err != nil {
			return fmt.Errorf("trainer: -model-ema: %w", err)
		}
	}
	return nil
}

// writeDeviceProfile prints the per-op device profile of a -device cuda run
// (GP_TAPE_PROFILE=1 turns it on: the top ops by device time, the memory peak and the
// allocator's statistics); nothing without a device or a profile. Like every side output, a
// failure to print it is a warning, never the job's end.
func (c *settings) writeDeviceProfile(w io.Writer, log *slog.Logger) {
	if c.dev == nil {
		return
	}
	if err := tape.WriteProfile(w, c.dev, 15); err != nil {
		log.Warn("trainer: device profile not written", "err", err)
	}
}
