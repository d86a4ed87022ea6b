package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

// InitFromEnv builds the process group described by the torchrun environment variables
// (see launchenv.FromOS and store.Rendezvous), over shared memory when every rank is on this
// host and over TCP otherwise (see WithTransport). The group's Close also closes the store;
// StoreOf returns it. Under a launcher that passes launchenv.PipeEnv (gprun does), it also
// makes the process exit when the launcher dies (see launchenv.WatchLauncher). The timeouts
// come from GP_COMM_TIMEOUT, GP_COMM_WARN_AFTER and GP_RDZV_TIMEOUT when set (see
// TimeoutEnv); opts override them.
//
// It leaves the process's threads alone: a program that runs as one of several ranks on a
// host lowers the Go runtime's monitor thread itself, first thing in main (parallel/sysmon's
// Lower: bench/ddp's images/s 6-10% higher on 2 cores).
func InitFromEnv(ctx context.Context, opts ...Option) (Group, error) {
	launchenv.WatchLauncher()
	env, err := launchenv.FromOS()
	if err != nil {
		return nil, err
	}
	return InitFromConfig(ctx, env, opts...)
}

// InitFromConfig is InitFromEnv with an explicit launchenv.Env. Both read the timeouts from the
// environment (see TimeoutEnv, WarnAfterEnv and RendezvousTimeoutEnv); options passed
// explicitly take precedence. Both build the backend BackendEnv (GP_COMM_BACKEND) names, or
// a registered backend that asks for this job (the MPI one under mpirun), with no
// rendezvous of this package's own; see RegisterBackend.
func InitFromConfig(ctx context.Context, env launchenv.Env, opts ...Option) (Group, error) {
	envOpts, err := timeoutsFromEnv()
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	opts = append(envOpts, opts...)
	bcfg := newConfig(opts)
	name, b, ok, err := chooseBackend(env, &bcfg.transport)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	if ok {
		return initBackend(ctx, name, b, env, bcfg)
	}
	opts = append(opts, WithTransport(bcfg.transport))
	cfg := newConfig(opts)
	st, err := store.Rendezvous(ctx, env, store.WithSecret(cfg.secretValue()), store.WithTimeout(cfg.timeout),
		store.WithJoinTimeout(cfg.connectTimeout), store.WithLogger(cfg.logger))
	if err != nil {
		return nil, err
	}
	t, local, first, err := dialHost(ctx, st, env, cfg)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	gr := newGroup(t, cfg)
	if first != nil {
		gr.attachHier(first, local)
		if local != nil {
			gr.onClose = append(gr.onClose, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), cfg.closeTimeout)
				defer cancel()
				return local.Close(ctx)
			})
		}
	}
	gr.store = st
	gr.onClose = append(gr.onClose, st.Close)
	return gr, nil
}

// dialHost builds the transport WithTransport (or GP_COMM_TRANSPORT) asks for; by default
// shared memory when every rank is on this host and can map the others' rings, else TCP,
// run hierarchically (first not nil, local the transport among this host's ranks) when
// HierarchyEnv asks for it or, by default, when some host runs several ranks.
func dialHost(ctx context.Context, st *store.Store, env launchenv.Env, cfg config) (t, local Transport, first []int, err error) {
	mode := cfg.transport
	if mode == "" {
		mode = os.Getenv("GP_COMM_TRANSPORT")
	}
	switch mode {
	case "tcp":
		t, err = dialTCP(ctx, st, env.Rank, env.WorldSize, cfg)
		return t, nil, nil, err
	case "shm":
		t, err = dialSHM(ctx, st, env.Rank, env.WorldSize, cfg, true)
		return t, nil, nil, err
	case "", "auto":
		hmode, err := hierarchyMode()
		if err != nil {
			return nil, nil, nil, err
		}
		if env.WorldSize > 1 && (hmode == "on" || hmode == "auto" && env.LocalWorldSize != env.WorldSize) {
			first, err := hostLayout(ctx, st, env, cfg)
			if err != nil {
				return nil, nil, nil, err
			}
			use, err := useHierarchy(hmode, first, env)
			if err != nil {
				return nil, nil, nil, err
			}
			if use {
				t, local, err := dialHier(ctx, st, env, cfg, first)
				return t, local, first, err
			}
		}
		if env.LocalWorldSize != env.WorldSize {
			t, err = dialTCP(ctx, st, env.Rank, env.WorldSize, cfg)
			return t, nil, nil, err
		}
		t, err = dialSHM(ctx, st, env.Rank, env.WorldSize, cfg, false)
		return t, nil, nil, err
	}
	return nil, nil, nil, fmt.Errorf("%w: transport %q (GP_COMM_TRANSPORT or WithTransport): want tcp, shm or auto", ErrInvalid, mode)
}

// Environment variables of the timeouts, read by InitFromEnv and InitFromConfig. Each holds
// a Go duration ("90s", "10m", "1h30m"); a value that is not one, or is negative (zero for
// the timeouts), is an error naming the variable and the value.
const (
	// TimeoutEnv sets the collectives' timeout (WithTimeout; default 30 minutes).
	TimeoutEnv = "GP_COMM_TIMEOUT"
	// WarnAfterEnv sets the wait after which a collective logs a StallReport (WithWarnAfter;
	// default 30 s or half the timeout; 0 turns the warning off).
	WarnAfterEnv = "GP_COMM_WARN_AFTER"
	// RendezvousTimeoutEnv bounds the rendezvous and the connections between the ranks
	// (WithConnectTimeout; default 5 minutes).
	RendezvousTimeoutEnv = "GP_RDZV_TIMEOUT"
)

// timeoutsFromEnv returns the options the timeout variables ask for.
func timeoutsFromEnv() ([]Option, error) {
	var opts []Option
	var errs []error
	for _, v := range []struct {
		name     string
		zeroOK   bool
		asOption func(time.Duration) Option
	}{
		{TimeoutEnv, false, WithTimeout},
		{WarnAfterEnv, true, WithWarnAfter},
		{RendezvousTimeoutEnv, false, WithConnectTimeout},
	} {
		s, ok := os.LookupEnv(v.name)
		if !ok || s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: %s=%q is not a duration (like 90s, 10m or 1h30m)", ErrInvalid, v.name, s))
		case d < 0 || d == 0 && !v.zeroOK:
			errs = append(errs, fmt.Errorf("%w: %s=%q: the duration must be positive", ErrInvalid, v.name, s))
		default:
			opts = append(opts, v.asOption(d))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return opts, nil
}

// StoreOf returns the store a group built by InitFromEnv uses, or nil.
func StoreOf(g Group) *store.Store {
	if gr, ok := g.(*group); ok {
		return gr.store
	}
	return nil
}

// TransportOf names the transport g runs on: "shm" (shared memory), "tcp", "hier" (shared
// memory inside hosts and TCP between them; see HierarchyEnv), "local" (in-process), what a
// group from another package's Backend() method says ("mpi"), or "".
func TransportOf(g Group) string {
	gr, ok := g.(*group)
	if !ok {
		if b, ok := g.(interface{ Backend() string }); ok {
			return b.Backend()
		}
		return ""
	}
	if gr.hier != nil {
		return "hier"
	}
	switch gr.t.(type) {
	case *tcpTransport:
		return "tcp"
	case *localTransport:
		return "local"
	}
	if _, ok := gr.t.(viewRecver); ok {
		return "shm"
	}
	return ""
}
