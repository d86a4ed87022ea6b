package store

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// Rendezvous connects to the store for env: rank 0 hosts it on MASTER_ADDR:MASTER_PORT (on
// every interface, or on the loopback one when MASTER_ADDR is a loopback address), every rank
// (rank 0 included) connects and joins, which fails on a duplicate rank or a WORLD_SIZE that
// differs from rank 0's, naming both ranks' values and where this rank's came from. The
// connections must carry the secret (WithSecret, default auth.SecretEnv). WithJoinTimeout
// (and ctx) bound the wait for an unreachable master. On rank 0 the returned Store's Close
// also stops the server, so rank 0 closes it last.
func Rendezvous(ctx context.Context, env launchenv.Env, opts ...Option) (*Store, error) {
	cfg := newConfig(opts)
	ctx, cancel := context.WithTimeout(ctx, cfg.joinTimeout)
	defer cancel()
	addr := net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.MasterPort))
	var srv *Server
	if env.Rank == 0 {
		listen := net.JoinHostPort("", strconv.Itoa(env.MasterPort))
		if ip := net.ParseIP(env.MasterAddr); (ip != nil && ip.IsLoopback()) || env.MasterAddr == "localhost" {
			listen = addr
		}
		var err error
		if srv, err = Listen(listen, env.WorldSize, opts...); err != nil {
			return nil, fmt.Errorf("rank 0: rendezvous: %w (is another rank 0 or job using port %d?)", err, env.MasterPort)
		}
	}
	st, err := Dial(ctx, addr, opts...)
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, fmt.Errorf("rank %d: rendezvous: %w", env.Rank, err)
	}
	st.server = srv
	if err := st.join(ctx, env.Rank, env.WorldSize); err != nil {
		st.Close()
		if env.From != "" {
			// The master's message names its own values; say where this rank's came from.
			return nil, fmt.Errorf("rank %d (RANK and WORLD_SIZE=%d from %s, %s): %w", env.Rank, env.WorldSize, env.From, env.Launcher, err)
		}
		return nil, fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	return st, nil
}
