package mpi

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// registerErr is why the backend could not be registered with comm (nil when it was).
var registerErr error

// init registers the backend "mpi" with comm, as database/sql drivers register themselves;
// it loads nothing.
func init() {
	registerErr = comm.RegisterBackend("mpi", comm.Backend{New: newFromEnv, Auto: auto})
}

// auto chooses MPI under mpirun when libmpi loads.
func auto(env launchenv.Env) bool { return env.Launcher == launchenv.OpenMPI && Load() == nil }

// RingBytesEnv sets WithRingBytes for the groups comm.InitFromEnv builds (bytes, one
// threshold for all-reduce, reduce-scatter, all-gather and broadcast; 0 runs OpenMPI's
// collectives at every size). All ranks must set the same value.
const RingBytesEnv = "GP_MPI_RING_BYTES"

// newFromEnv is the backend comm.InitFromEnv builds: New with comm's settings, checked
// against the launcher's rank and world size.
func newFromEnv(ctx context.Context, cfg comm.BackendConfig) (comm.Group, error) {
	if cfg.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
	}
	opts := []Option{WithTimeout(cfg.Timeout), WithWarnAfter(cfg.WarnAfter), WithCloseTimeout(cfg.CloseTimeout),
		WithLogger(cfg.Logger), WithDebug(cfg.Debug)}
	if v, ok := os.LookupEnv(RingBytesEnv); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("mpi: %w: %s=%q is not a byte count", comm.ErrInvalid, RingBytesEnv, v)
		}
		opts = append(opts, WithRingBytes(n))
	}
	g, err := New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	if g.Rank() != cfg.Env.Rank || g.Size() != cfg.Env.WorldSize {
		err := fmt.Errorf("mpi: MPI_COMM_WORLD has this process as rank %d of %d, the environment (%s) says %d of %d: start the job with mpirun, or choose another backend (%s)",
			g.Rank(), g.Size(), cfg.Env.From, cfg.Env.Rank, cfg.Env.WorldSize, comm.BackendEnv)
		return nil, fmt.Errorf("%w: %w", comm.ErrInvalid, joinClose(err, g))
	}
	return g, nil
}

func joinClose(err error, g *Group) error {
	if cerr := g.Close(context.Background()); cerr != nil {
		return fmt.Errorf("%w (closing: %w)", err, cerr)
	}
	return err
}
