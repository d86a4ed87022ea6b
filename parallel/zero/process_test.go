package zero

import (
	"context"
	"errors"
	"fmt"
	"github.com/gorgonia-parallel/gp/train"
	"hash/fnv"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// The test binary doubles as the worker of the multi-process tests: with GP_ZERO_TEST_WORKER
// set it runs that scenario as one rank (configured by the torchrun variables) and exits.
func TestMain(m *testing.M) { proctest.Main(m, "GP_ZERO_TEST_WORKER", worker) }

const procPer = 2

func worker(scenario string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(20*time.Second), comm.WithConnectTimeout(20*time.Second))
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	n, r := g.Size(), g.Rank()
	m, err := nn.NewModel(convNet(false), nn.WithSeed(int64(1+100*r)))
	if err != nil {
		return err
	}
	e, err := New(ctx, m, g, WithOptimizer(AdamW(lr)), WithWeightDecay(wd))
	if err != nil {
		return err
	}
	defer e.Close()
	p, err := e.Compile(classify(procPer))
	if err != nil {
		return err
	}
	step := func(s int) error {
		e.ZeroGrad()
		if err := feed(p, s, r*procPer, (r+1)*procPer); err != nil {
			return err
		}
		return train.RunStep(ctx, p)
	}
	switch scenario {
	case "equiv":
		for s := range 5 {
			if err := step(s); err != nil {
				return err
			}
		}
		got, err := e.GatherParams(ctx)
		if err != nil {
			return err
		}
		want, err := reference(false, n, procPer, 5)
		if err != nil {
			return err
		}
		if err := compareParams(got, nil, want, equivTol); err != nil {
			return err
		}
		h := fnv.New64a()
		for _, v := range got {
			fmt.Fprint(h, math.Float32bits(v))
		}
		fmt.Printf("checksum %x\n", h.Sum64())
		return nil
	case "killsave":
		dir := os.Getenv("GP_ZERO_CKPT")
		written := 0
		saveFault = func(rank int, stage string) {
			if stage == "shard-written" && rank == n-1 {
				if written++; written == 2 {
					proctest.KillSelf()
				}
			}
		}
		for s := range 4 {
			if err := step(s); err != nil {
				return err
			}
			if s == 1 || s == 3 {
				err := e.Save(ctx, dir, fmt.Sprintf("step%d", s+1))
				if s == 1 && err != nil {
					return err
				}
				if s == 3 {
					if err == nil {
						return errors.New("the second save succeeded although a rank was killed in it")
					}
					fmt.Println("save failed as expected:", err)
				}
			}
		}
		return nil
	}
	return fmt.Errorf("unknown scenario %q", scenario)
}

// spawn runs n worker processes of scenario over loopback and returns their outputs and
// exit errors; env is added to every rank's environment.
func spawn(t *testing.T, n int, scenario string, env ...string) ([]string, []error) {
	t.Helper()
	job := proctest.Spawn(t, n, "GP_ZERO_TEST_WORKER", scenario, func(int) []string {
		return append([]string{"GP_RDZV_SECRET=zero-test", "OPENBLAS_NUM_THREADS=1"}, env...)
	})
	return job.Outputs, job.Errs
}

// Real processes over loopback TCP, world 2 and 3: 5 AdamW steps, each rank checks the
// gathered parameters against one process on the global batch (rel ≤ 1e-5), and the
// ranks end bit-identical.
func TestEquivalenceProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world%d", world), func(t *testing.T) {
			outs, errs := spawn(t, world, "equiv")
			for r := range world {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v\n%s", r, errs[r], outs[r])
				}
				if !strings.HasPrefix(outs[r], "checksum") || outs[r] != outs[0] {
					t.Fatalf("ranks differ: %q", outs)
				}
			}
		})
	}
}

// Two processes save a checkpoint after step 2; during the save after step 4 rank 1 is
// SIGKILLed once its shard file is written (before the manifest). Rank 0's save fails
// naming the lost peer, and the directory still resolves to the step-2 checkpoint, which
// loads (consolidated and resharded to one rank) with the reference's step-2 parameters.
func TestKilledDuringSave(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	outs, errs := spawn(t, 2, "killsave", "GP_ZERO_CKPT="+dir)
	if errs[0] != nil || !strings.Contains(outs[0], "save failed as expected") {
		t.Fatalf("survivor: %v\n%s", errs[0], outs[0])
	}
	if errs[1] == nil {
		t.Fatalf("victim exited cleanly:\n%s", outs[1])
	}
	t.Log(strings.TrimSpace(outs[0]))
	if _, err := os.Stat(dir + "/step4/shard-1-of-2.npz"); err != nil {
		t.Errorf("the victim's new shard should exist (killed after writing it): %v", err)
	}
	sub, m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Tag != "step2" || m.Steps != 2 {
		t.Fatalf("latest checkpoint %s: tag %s steps %d, want step2", sub, m.Tag, m.Steps)
	}
	entries, _, err := Consolidate(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	want, err := reference(false, 2, procPer, 2)
	if err != nil {
		t.Fatal(err)
	}
	flat := make([]float32, want.Params.NumParams())
	for _, e := range entries {
		if p := want.Params.Param(e.Name); p != nil {
			copy(flat[p.Offset:], e.F32)
		}
	}
	if err := compareParams(flat, nil, want, equivTol); err != nil {
		t.Fatal(err)
	}
	one, _ := startRanks(t, 1, 2*procPer, false)
	if err := one[0].e.Load(dir); err != nil {
		t.Fatal(err)
	}
}
