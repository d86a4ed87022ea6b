package ddp

import (
	"context"
	"errors"
	"fmt"
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

// The test binary doubles as the worker of the multi-process tests: with GP_DDP_TEST_WORKER
// set it runs that scenario as one rank (configured by the torchrun variables) and exits.
func TestMain(m *testing.M) { proctest.Main(m, "GP_DDP_TEST_WORKER", worker) }

func worker(scenario string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	copts := []comm.Option{comm.WithTimeout(30 * time.Second), comm.WithConnectTimeout(20 * time.Second)}
	shared := os.Getenv("GP_DDP_SHARED") == "1"
	if shared {
		// Buckets of this small net are far below the direct-path threshold: lower it, and
		// the chunk, so that they take the staged path (and with shared gradients, the
		// zero-copy one).
		copts = append(copts, comm.WithSmallBytes(64), comm.WithChunkBytes(4096))
	}
	g, err := comm.InitFromEnv(ctx, copts...)
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	n, r := g.Size(), g.Rank()
	bn := os.Getenv("GP_DDP_BN") == "1"
	const per, steps = 2, 5
	mopts := []nn.ModelOption{nn.WithSeed(int64(1 + 100*r))}
	if shared {
		mopts = append(mopts, SharedGradients(ctx, g))
	}
	m, err := nn.NewModel(convNet(bn), mopts...)
	if err != nil {
		return err
	}
	opts := []Option{BucketCapBytes(256), FirstBucketBytes(64)}
	if shared {
		opts = []Option{BucketCapBytes(16 << 10), FirstBucketBytes(2 << 10)}
	}
	if bn {
		opts = append(opts, SyncBatchNorm())
	}
	d, err := New(ctx, m, g, opts...)
	if err != nil {
		return err
	}
	var bopts []nn.BuildOption
	if scenario == "kill" && r == n-1 {
		grads := 0
		bopts = append(bopts, nn.WithGradHook(func(*nn.Param) error {
			if grads++; grads == len(m.Params.Params)+3 { // step 1, third gradient
				proctest.KillSelf()
			}
			return nil
		}))
	}
	opt, err := newOpt(m)
	if err != nil {
		return err
	}
	p, err := d.Compile(classify(per), append(bopts, nn.WithOptimizer(opt))...)
	if err != nil {
		return err
	}
	for s := range steps {
		m.Params.ZeroGrad()
		if err := feed(p, s, 0, r*per, (r+1)*per); err != nil {
			return err
		}
		err := p.RunStep(ctx)
		if scenario == "kill" {
			if err == nil {
				continue
			}
			if !errors.Is(err, comm.ErrPeerGone) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", n-1)) {
				return fmt.Errorf("want ErrPeerGone naming rank %d, got %w", n-1, err)
			}
			fmt.Println("survivor saw:", err)
			return nil
		}
		if err != nil {
			return err
		}
	}
	if scenario == "kill" {
		return errors.New("no step failed although a rank was killed")
	}
	want, err := reference(bn, n, per, steps, 1)
	if err != nil {
		return err
	}
	if err := compareModels(m, want, equivTol); err != nil {
		return err
	}
	h := fnv.New64a()
	for _, v := range m.Params.Data {
		fmt.Fprint(h, math.Float32bits(v))
	}
	for _, b := range m.Params.Buffers {
		for _, v := range b.Data {
			fmt.Fprint(h, math.Float32bits(v))
		}
	}
	fmt.Printf("checksum %x\n", h.Sum64())
	return nil
}

// spawn runs n worker processes of scenario over loopback and returns their outputs and
// exit errors; env is added to every rank's environment.
func spawn(t *testing.T, n int, scenario string, env ...string) ([]string, []error) {
	t.Helper()
	job := proctest.Spawn(t, n, "GP_DDP_TEST_WORKER", scenario, func(int) []string {
		return append([]string{"GP_RDZV_SECRET=ddp-test", "OPENBLAS_NUM_THREADS=1"}, env...)
	})
	return job.Outputs, job.Errs
}

// Real processes on one host (InitFromEnv's shared-memory transport, TCP for control):
// world 2 and 3, with and without SyncBatchNorm, with ordinary gradients and with
// SharedGradients (buckets all-reduced in place), each rank checks itself against the
// one-process reference (rel ≤ 1e-5) and all ranks end bit-identical.
func TestEquivalenceProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, world := range []int{2, 3} {
		for _, c := range []struct{ bn, shared string }{{"0", "0"}, {"1", "0"}, {"0", "1"}, {"1", "1"}} {
			t.Run(fmt.Sprintf("world%d/bn=%s/shared=%s", world, c.bn, c.shared), func(t *testing.T) {
				outs, errs := spawn(t, world, "equiv", "GP_DDP_BN="+c.bn, "GP_DDP_SHARED="+c.shared)
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
}

// A process SIGKILLed in the middle of backward: the survivors fail with an error naming
// it and exit by themselves, with ordinary and with shared gradients (whose in-place
// all-reduce reads and writes the dead rank's memory).
func TestKilledProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, shared := range []string{"0", "1"} {
		t.Run("shared="+shared, func(t *testing.T) {
			outs, errs := spawn(t, 3, "kill", "GP_DDP_SHARED="+shared)
			for r := range 2 {
				if errs[r] != nil {
					t.Errorf("survivor %d: %v\n%s", r, errs[r], outs[r])
				}
			}
			if errs[2] == nil {
				t.Errorf("victim exited cleanly:\n%s", outs[2])
			}
			t.Log(outs[0])
		})
	}
}
