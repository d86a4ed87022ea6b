package mpi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/mpi"
)

func init() {
	scenarios["smoke"] = func() error {
		ctx := context.Background()
		g, err := mpi.New(ctx, mpi.WithTimeout(20*time.Second))
		if err != nil {
			return err
		}
		buf := comm.F32{float32(g.Rank() + 1), 2}
		if err := g.AllReduce(buf, comm.Sum).Wait(ctx); err != nil {
			return err
		}
		fmt.Printf("rank %d of %d: %v level %d %s\n", g.Rank(), g.Size(), buf, g.ThreadLevel(), g.Version())
		return g.Close(ctx)
	}
}

func TestSmoke(t *testing.T) {
	requireMPI(t)
	j := mpirun(t, 2, "smoke", 30*time.Second)
	if j.err != nil || !strings.Contains(j.out, "rank 1 of 2: [3 4]") {
		t.Fatalf("%v\n%s", j.err, j.out)
	}
	t.Log(j.out)
}
