package mpi_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
)

func init() { scenarios["ddp"] = ddpRank }

// equivTol is the tolerance of parallel/ddp's equivalence tests (relative, per parameter,
// ‖·‖₂): DDP sums the same float32 gradients in another order than one process on the
// whole batch (per-rank partial sums, then the all-reduce), a few ulps per step.
const equivTol = 1e-5

// DDP over MPI (chosen by comm.InitFromEnv by itself under mpirun): 5 SGD-momentum steps at
// world 2, with and without SyncBatchNorm, equal one process trained on the concatenated
// global batch (rel ≤ 1e-5, checked by each rank), and both ranks end bit-identical.
func TestDDPEquivalence(t *testing.T) {
	requireMPI(t)
	sum := regexp.MustCompile(`rank (\d) via mpi: checksum ([0-9a-f]+)`)
	for _, bn := range []string{"0", "1"} {
		t.Run("bn="+bn, func(t *testing.T) {
			j := mpirun(t, 2, "ddp", 60*time.Second, "GP_DDP_BN="+bn)
			m := sum.FindAllStringSubmatch(j.out, -1)
			if j.err != nil || len(m) != 2 {
				t.Fatalf("mpirun: %v, want two ranks' checksums over mpi:\n%s", j.err, j.out)
			}
			if m[0][2] != m[1][2] {
				t.Errorf("ranks end with different parameters:\n%s", j.out)
			}
		})
	}
}

func ddpRank() error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	if tr := comm.TransportOf(g); tr != "mpi" {
		return fmt.Errorf("InitFromEnv under mpirun chose %q, want mpi", tr)
	}
	n, r := g.Size(), g.Rank()
	bn := os.Getenv("GP_DDP_BN") == "1"
	const per, steps = 2, 5
	m, err := nn.NewModel(testnet.ConvNet(bn), nn.WithSeed(int64(1+100*r))) // New's broadcast must align them
	if err != nil {
		return err
	}
	opts := []ddp.Option{ddp.BucketCapBytes(256), ddp.FirstBucketBytes(64)}
	if bn {
		opts = append(opts, ddp.SyncBatchNorm())
	}
	d, err := ddp.New(ctx, m, g, opts...)
	if err != nil {
		return err
	}
	opt, err := sgd(m.Params)
	if err != nil {
		return err
	}
	p, err := d.Compile(testnet.Classify(per), nn.WithOptimizer(opt))
	if err != nil {
		return err
	}
	for s := range steps {
		m.Params.ZeroGrad()
		if err := feed(p, s, r*per, (r+1)*per); err != nil {
			return err
		}
		if err := p.RunStep(ctx); err != nil {
			return err
		}
	}
	want, err := reference(bn, n*per, steps)
	if err != nil {
		return err
	}
	for _, wp := range want.Params.Params {
		if rel := testnet.Rel(m.Params.Param(wp.Name).Data, wp.Data); !(rel <= equivTol) {
			return fmt.Errorf("parameter %s: rel %.3g > %.1g", wp.Name, rel, equivTol)
		}
	}
	for _, wb := range want.Params.Buffers {
		if wb.Data != nil {
			if rel := testnet.Rel(m.Params.Buffer(wb.Name).Data, wb.Data); !(rel <= equivTol) {
				return fmt.Errorf("buffer %s: rel %.3g > %.1g", wb.Name, rel, equivTol)
			}
		}
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
	fmt.Printf("rank %d via %s: checksum %x\n", r, comm.TransportOf(g), h.Sum64())
	return nil
}

func sgd(ps *nn.ParamSet) (optim.Optimizer, error) {
	segs, err := optim.Segments(ps, 1e-4)
	if err != nil {
		return nil, err
	}
	return optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
}

// feed sets the network's inputs to samples [lo, hi) of step.
func feed(p testnet.Inputs, step, lo, hi int) error { return testnet.Feed(p, step, 0, lo, hi) }

// reference trains one process on the global batch of each step.
func reference(bn bool, batch, steps int) (*nn.Model, error) {
	return testnet.Reference(bn, batch, steps, 1, sgd)
}
