package devzero_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
)

// The test binary doubles as the worker of the multi-process test: with workerVar set it
// runs as one rank (the torchrun variables, and the fake libraries and emulator its parent
// built, inherited through the environment) and exits.
const workerVar = "GP_DEVZERO_TEST_WORKER"

// procSteps is the length of the job; the victim is killed during step procKillAt, after
// the checkpoint of step procKillAt-1 (one after every step).
const procSteps, procKillAt = 6, 4

// worker trains device ZeRO-3 (the model of padded units, AdamW on the device) from step 0,
// or from the checkpoint dir's LATEST when GP_DEVZERO_RESUME is set, to procSteps, saving
// after every step; with GP_DEVZERO_KILL set rank 1 SIGKILLs itself in step procKillAt,
// after its backward. Rank 0 prints each step's loss and a checksum of the final
// parameters' bits.
func worker(string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	dir := os.Getenv("GP_DEVZERO_CKPT")
	dev, err := cuda.Open(0)
	if err != nil {
		return err
	}
	defer dev.Close()
	g, err := nccl.InitFromEnv(ctx, nccl.WithDevice(0), nccl.WithTimeout(20*time.Second))
	if err != nil {
		return err
	}
	defer g.Close(context.Background())
	r, n := g.Rank(), g.Size()
	md := models[1]
	per := global / n
	build := md.build(per)
	m, err := nn.NewGraphModel(build)
	if err != nil {
		return err
	}
	e, _, err := newEngine(ctx, dev, m, g, adamOpts(md.opts...)...)
	if err != nil {
		return err
	}
	defer e.Close()
	p, err := e.Compile(build)
	if err != nil {
		return err
	}
	defer p.Close()
	from := 0
	if os.Getenv("GP_DEVZERO_RESUME") != "" {
		_, man, err := zero.ReadManifest(dir)
		if err != nil {
			return err
		}
		if err := e.Load(dir); err != nil {
			return err
		}
		from = int(man.Steps)
	}
	kill := os.Getenv("GP_DEVZERO_KILL") != "" && r == 1
	x, y := make([]float32, per*gormlp.In), make([]float32, per*gormlp.Out)
	for s := from; s < procSteps; s++ {
		gormlp.Data(x, y, s*global+r*per, per)
		if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
			return err
		}
		if kill && s == procKillAt {
			if err := p.Run(ctx); err != nil {
				return err
			}
			proctest.KillSelf()
		}
		if err := train.RunStep(ctx, p); err != nil {
			return fmt.Errorf("rank %d: step %d: %w", r, s, err)
		}
		l, err := p.LossValue()
		if err != nil {
			return err
		}
		if r == 0 {
			fmt.Printf("step %d loss %08x\n", s, math.Float32bits(l))
		}
		if err := e.Save(ctx, dir, "step"+strconv.Itoa(s+1)); err != nil {
			return fmt.Errorf("rank %d: save after step %d: %w", r, s, err)
		}
	}
	params, err := e.GatherParams(ctx)
	if err != nil {
		return err
	}
	h := fnv.New64a()
	for _, v := range params {
		fmt.Fprint(h, math.Float32bits(v))
	}
	if r == 0 {
		fmt.Printf("checksum %x\n", h.Sum64())
	}
	return nil
}

// Two processes of device ZeRO-3 (each its own emulated device, the fake NCCL between
// them) save a checkpoint after every step; in step 4 rank 1 is SIGKILLed after its
// backward, and rank 0 fails instead of hanging. Two new processes resume from the newest
// complete checkpoint (step 4) and finish the job: steps 4 and 5 have the losses of an
// uninterrupted run bit for bit, and the final parameters its checksum.
func TestKilledAndResumedBitIdentical(t *testing.T) {
	cudatest.Require(t)
	if testing.Short() {
		t.Skip("spawns processes")
	}
	run := func(dir string, env ...string) ([]string, []error) {
		job := proctest.Spawn(t, world, workerVar, "train", func(int) []string {
			return append([]string{"GP_RDZV_SECRET=devzero-test", "GP_DEVZERO_CKPT=" + dir}, env...)
		})
		return job.Outputs, job.Errs
	}
	whole, errs := run(t.TempDir())
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s\n%s", err, whole[0], whole[1])
	}
	dir := t.TempDir()
	outs, errs := run(dir, "GP_DEVZERO_KILL=1")
	if errs[1] == nil || errs[0] == nil {
		t.Fatalf("killed run: rank 0 %v, rank 1 %v; want both to fail\n%s\n%s", errs[0], errs[1], outs[0], outs[1])
	}
	t.Logf("killed run: rank 0 ended with %v", strings.TrimSpace(outs[0][strings.LastIndex(strings.TrimSpace(outs[0]), "\n")+1:]))
	_, man, err := zero.ReadManifest(dir)
	if err != nil || man.Steps != procKillAt {
		t.Fatalf("newest checkpoint after the kill: %+v, %v; want step %d", man, err, procKillAt)
	}
	resumed, errs := run(dir, "GP_DEVZERO_RESUME=1")
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("resumed run: %v\n%s\n%s", err, resumed[0], resumed[1])
	}
	want := whole[0][strings.Index(whole[0], fmt.Sprintf("step %d ", procKillAt)):]
	if !strings.Contains(resumed[0], want) {
		t.Fatalf("resumed run's rank 0:\n%s\nwant the uninterrupted run's last steps and checksum:\n%s", resumed[0], want)
	}
	t.Logf("resumed from step %d: %s", procKillAt, strings.ReplaceAll(strings.TrimSpace(want), "\n", "; "))
}
