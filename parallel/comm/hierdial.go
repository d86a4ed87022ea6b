package comm

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

// HierarchyEnv chooses hierarchical collectives (see Note [Hierarchical collectives]) for
// InitFromEnv and InitFromConfig: "1" uses them whenever the ranks of each host are
// contiguous (an error otherwise), "0" never; unset or "auto" uses them when the job spans
// several hosts (LOCAL_WORLD_SIZE < WORLD_SIZE) and some host runs several ranks. A rank's
// host is its GROUP_RANK. Every rank must see the same value. GP_COMM_TRANSPORT=tcp or shm
// (or WithTransport) keeps the flat transport whatever this says.
const HierarchyEnv = "GP_COMM_HIERARCHY"

// hierarchyMode reads HierarchyEnv: "auto", "on" or "off".
func hierarchyMode() (string, error) {
	switch v := os.Getenv(HierarchyEnv); v {
	case "", "auto":
		return "auto", nil
	case "1":
		return "on", nil
	case "0":
		return "off", nil
	default:
		return "", fmt.Errorf("%w: %s=%q: want 0, 1 or auto", ErrInvalid, HierarchyEnv, v)
	}
}

// hostLayout tells every rank's host (its GROUP_RANK) to the others through the store and
// returns first (first[h] is the lowest rank of host h, hosts numbered in rank order;
// first[hosts] = world size), or nil when some host's ranks are not contiguous.
func hostLayout(ctx context.Context, st *store.Store, env launchenv.Env, cfg config) ([]int, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
	defer cancel()
	gen, err := st.Add(ctx, "comm/hostgen/"+strconv.Itoa(env.Rank), 1)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("comm/hosts%d/", gen)
	if err := st.Set(ctx, prefix+strconv.Itoa(env.Rank), []byte(strconv.Itoa(env.GroupRank))); err != nil {
		return nil, err
	}
	var first []int
	seen := map[string]bool{}
	prev := ""
	for r := range env.WorldSize {
		v, err := st.Get(ctx, prefix+strconv.Itoa(r))
		if err != nil {
			return nil, fmt.Errorf("waiting for rank %d to publish its host: %w", r, err)
		}
		if h := string(v); r == 0 || h != prev {
			if seen[h] {
				return nil, nil // host h's ranks are not contiguous
			}
			seen[h], prev = true, h
			first = append(first, r)
		}
	}
	return append(first, env.WorldSize), nil
}

// useHierarchy decides, identically on every rank, whether a job of layout first runs its
// collectives hierarchically.
func useHierarchy(mode string, first []int, env launchenv.Env) (bool, error) {
	if mode == "on" {
		if first == nil {
			return false, fmt.Errorf("%w: %s=1 needs the ranks of each host (GROUP_RANK) to be contiguous", ErrInvalid, HierarchyEnv)
		}
		return true, nil
	}
	if len(first) < 3 {
		return false, nil
	}
	for h := range len(first) - 1 {
		if first[h+1]-first[h] > 1 {
			return true, nil
		}
	}
	return false, nil
}

// dialHier connects a hierarchical group: shared-memory rings among this host's ranks (TCP
// among them when those cannot be mapped) and TCP between every pair of ranks, which carries
// the leaders' traffic, barriers, messages and the control plane.
func dialHier(ctx context.Context, st *store.Store, env launchenv.Env, cfg config, first []int) (Transport, Transport, error) {
	h := hostOf(first, env.Rank)
	lo, hi := first[h], first[h+1]
	var local Transport
	if hi-lo > 1 {
		lcfg := cfg
		lcfg.streams = 1 // up and down run in opposite directions: one ring each way suffices
		lt, problem, err := dialLocalSHM(ctx, st, fmt.Sprintf("h%d/", h), env.Rank-lo, hi-lo, lcfg)
		if err != nil {
			return nil, nil, err
		}
		if problem != nil {
			cfg.logger.Debug("comm: shared memory unavailable inside the host, using TCP", "rank", env.Rank, "reason", problem)
		}
		if lt != nil {
			local = lt
			cfg.onAbort = func(err error) { lt.Abort(err, false) }
		}
	}
	t, err := dialTCP(ctx, st, env.Rank, env.WorldSize, cfg)
	if err != nil {
		if local != nil {
			local.Close(ctx)
		}
		return nil, nil, err
	}
	if local == nil && hi-lo > 1 {
		ranks := make([]int, hi-lo)
		for i := range ranks {
			ranks[i] = lo + i
		}
		local = (&viewTransport{t: t, rank: env.Rank - lo, ranks: ranks}).transport()
	}
	return t, local, nil
}
