package launch

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Rendezvous gathers the nodes of a multi-node job, round after round, as torchrun's
// rendezvous handlers do: every node joins a round, and a round completes when the job's
// nodes have joined it. When any node's workers fail (or a node leaves or arrives), a new
// round starts and every node re-joins it, so that the job restarts everywhere together.
type Rendezvous interface {
	// Next joins the current round (or the next one when the current one completed without
	// this node) and returns once it is complete.
	Next(ctx context.Context) (Round, error)
	// Fail ends round r because this node's workers failed: every node's Round.Changed
	// closes. Ending a round that already ended does nothing.
	Fail(ctx context.Context, r Round) error
}

// Finisher is implemented by rendezvous backends with an exit barrier: Done reports that this
// node's workers all succeeded in round r and returns once every node's have (or the round
// ended), so that a node that finishes first does not leave while the others still run.
type Finisher interface {
	Done(ctx context.Context, r Round) error
}

// Round is one completed rendezvous round as this node sees it.
type Round struct {
	// Version numbers the rounds of a run, increasing.
	Version int64
	// NodeRank is this node's rank, NNodes the number of nodes in the round.
	NodeRank, NNodes int
	// MasterAddr and MasterPort are where rank 0 (on node 0) hosts the store.
	MasterAddr string
	MasterPort int
	// Secret is the job's rendezvous secret shared through the rendezvous ("" when the
	// backend does not share one).
	Secret string
	// Changed is closed when the round ends: some node's workers failed or a node left.
	Changed <-chan struct{}
	// Ended, when set, says after Changed closed why the round ended: failed when some
	// node's workers failed (a restart that counts against MaxRestarts), not failed when
	// only the membership changed (a node was lost or joins an elastic job), which, as in
	// torchrun, restarts the workers without counting. Without Ended every end counts.
	Ended func() (failed bool, why string)
}

// errRoundChanged stops a group of workers whose rendezvous round ended.
var errRoundChanged = errors.New("launch: rendezvous round ended")

// runRounds is Run with a rendezvous: each round assigns this node its rank and the master;
// a failure here ends the round for every node, a round ended elsewhere stops the workers
// here, and both count as a restart (TORCHELASTIC_RESTART_COUNT) of this node's workers.
func runRounds(ctx context.Context, cfg Config) error {
	cfg.NNodes = max(1, cfg.NNodes)
	secret := cfg.Secret
	failures := 0 // the restarts that count against MaxRestarts
	bo := backoff{first: cfg.RestartBackoff}
	for restart := 0; ; restart++ {
		rd, err := cfg.Rendezvous.Next(ctx)
		if err != nil {
			return fmt.Errorf("launch: rendezvous: %w", err)
		}
		c := cfg
		c.NodeRank, c.NNodes, c.MasterAddr, c.MasterPort = rd.NodeRank, rd.NNodes, rd.MasterAddr, rd.MasterPort
		c.Secret = secret
		if c.Secret == "" {
			c.Secret = rd.Secret
		}
		if err := c.defaults(); err != nil {
			return err
		}
		fmt.Fprintf(c.Stderr, "gprun: rendezvous round %d: node rank %d of %d, master %s:%d\n",
			rd.Version, rd.NodeRank, rd.NNodes, rd.MasterAddr, rd.MasterPort)
		start := time.Now()
		werr, err := runOnce(ctx, &c, restart, rd.Changed)
		switch {
		case errors.Is(err, errRoundChanged):
			failed, why := true, "another node failed or left"
			if rd.Ended != nil {
				failed, why = rd.Ended()
			}
			if !failed {
				fmt.Fprintf(c.Stderr, "gprun: rendezvous round %d ended: %s; restarting the workers in a new round\n", rd.Version, why)
				continue
			}
			if failures >= cfg.MaxRestarts {
				return fmt.Errorf("launch: rendezvous round %d ended (%s) after %d restarts", rd.Version, why, failures)
			}
			failures++
			wait := bo.next(time.Since(start))
			fmt.Fprintf(c.Stderr, "gprun: rendezvous round %d ended: %s; restarting the workers (%d/%d)%s\n", rd.Version, why, failures, cfg.MaxRestarts, restartIn(wait))
			if err := c.sleep(ctx, wait); err != nil {
				return err
			}
			continue
		case err != nil:
			return err
		case werr == nil:
			if f, ok := cfg.Rendezvous.(Finisher); ok {
				if err := f.Done(ctx, rd); err != nil {
					return fmt.Errorf("launch: rendezvous exit barrier: %w", err)
				}
			}
			return nil
		}
		werr.Restarts = restart
		// End the round for every node, also on the last failure: the others must not wait.
		if ferr := cfg.Rendezvous.Fail(ctx, rd); ferr != nil {
			fmt.Fprintf(c.Stderr, "gprun: ending rendezvous round %d: %v\n", rd.Version, ferr)
		}
		if failures >= cfg.MaxRestarts {
			return werr
		}
		failures++
		wait := bo.next(time.Since(start))
		fmt.Fprintf(c.Stderr, "gprun: %s\ngprun: new rendezvous round, restarting the workers (%d/%d)%s\n", werr.Report(), failures, cfg.MaxRestarts, restartIn(wait))
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
}
