// Package etcdrdzv is gprun's multi-node rendezvous through etcd (launch.Rendezvous), after
// torchrun's etcd rendezvous: nodes join numbered rounds under a run id, and a node's restart
// starts a new round that every node re-joins.
//
// Keys, under /gp/rdzv/<run id>/:
//
//	round                 the current round (decimal); bumped to end a round
//	secret                the job's rendezvous secret, created once
//	r<round>/node/<id>    a node's registration "host:port", attached to its lease
//	r<round>/final        the completed round: the member ids in node-rank order
//
// A node registers in the current round with a lease (TTL), so a node that dies vanishes
// from it. The first node to see NNodes registrations writes final (a transaction: exactly
// one writer); node ranks are the join order (etcd's create revision), and node 0's
// registration names the master address and port. A completed round ends when a node's
// workers fail (Fail bumps round), when a member's registration disappears (its lease
// expired), or when a new node finds the current round complete without it (it bumps round
// to be let in); every node watches for that and re-joins.
package etcdrdzv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorgonia-parallel/gp/parallel/launch"
)

// Config configures a node's rendezvous.
type Config struct {
	// Endpoints are the etcd client endpoints (host:port).
	Endpoints []string
	// RunID names the job; nodes of one job share it (required).
	RunID string
	// NNodes is the number of nodes a round needs.
	NNodes int
	// Host is the address other nodes reach this node at, published as the master address
	// when it gets node rank 0 (default: the local address of the route to the first
	// endpoint).
	Host string
	// TTL is the lease of this node's registrations (default 10s): a node that dies leaves
	// its round this long after.
	TTL time.Duration
	// Timeout bounds the wait for a round to complete (default 10 minutes).
	Timeout time.Duration
}

// Rendezvous is a node's handle on the run's rounds. Close it to leave.
type Rendezvous struct {
	cfg    Config
	cli    *clientv3.Client
	lease  clientv3.LeaseID
	id     string
	prefix string

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ launch.Rendezvous = (*Rendezvous)(nil)

// New connects to etcd and takes a lease for this node's registrations.
func New(ctx context.Context, cfg Config) (*Rendezvous, error) {
	if cfg.RunID == "" || strings.Contains(cfg.RunID, "/") {
		return nil, fmt.Errorf("etcdrdzv: run id %q: need a non-empty id without '/' (--run-id)", cfg.RunID)
	}
	if cfg.NNodes < 1 || len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("etcdrdzv: need at least one endpoint and one node (nnodes %d)", cfg.NNodes)
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.Host == "" {
		cfg.Host = launch.RouteAddr(cfg.Endpoints[0])
	}
	// The client's own logger reports every cancelled call (as on Close); errors reach the
	// caller anyway.
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second, Context: ctx, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcdrdzv: connecting to %v: %w", cfg.Endpoints, err)
	}
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lg, err := cli.Grant(gctx, int64(max(1, cfg.TTL/time.Second)))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcdrdzv: etcd at %v: %w", cfg.Endpoints, err)
	}
	host, _ := os.Hostname()
	r := &Rendezvous{cfg: cfg, cli: cli, lease: lg.ID, prefix: "/gp/rdzv/" + cfg.RunID + "/",
		id: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), launch.RandomHex(4))}
	kctx, kcancel := context.WithCancel(context.Background())
	r.cancel = kcancel
	ka, err := cli.KeepAlive(kctx, lg.ID)
	if err != nil {
		kcancel()
		cli.Close()
		return nil, fmt.Errorf("etcdrdzv: keeping the lease alive: %w", err)
	}
	r.wg.Add(1)
	go func() { // the client needs its keep-alive responses drained
		defer r.wg.Done()
		for range ka {
		}
	}()
	return r, nil
}

// ID is this node's id in the registrations.
func (r *Rendezvous) ID() string { return r.id }

// Close revokes the lease (this node's registrations vanish) and disconnects.
func (r *Rendezvous) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r.cli.Revoke(ctx, r.lease)
	r.cancel()
	err := r.cli.Close()
	r.wg.Wait()
	return err
}

// Next joins the current round and waits for it to complete; see the package comment.
func (r *Rendezvous) Next(ctx context.Context) (launch.Round, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	secret, err := r.secret(ctx)
	if err != nil {
		return launch.Round{}, err
	}
	for {
		ver, err := r.current(ctx)
		if err != nil {
			return launch.Round{}, err
		}
		rp := r.prefix + "r" + strconv.FormatInt(ver, 10) + "/"
		// A round completed without this node: ask for a new one.
		if fin, err := r.cli.Get(ctx, rp+"final"); err != nil {
			return launch.Round{}, r.wrap(err)
		} else if len(fin.Kvs) > 0 && !slices.Contains(strings.Split(string(fin.Kvs[0].Value), ","), r.id) {
			if err := r.bump(ctx, ver); err != nil {
				return launch.Round{}, err
			}
			continue
		}
		port, err := launch.FreePort(r.cfg.Host)
		if err != nil {
			return launch.Round{}, fmt.Errorf("etcdrdzv: master port: %w", err)
		}
		addr := net.JoinHostPort(r.cfg.Host, strconv.Itoa(port))
		if _, err := r.cli.Put(ctx, rp+"node/"+r.id, addr, clientv3.WithLease(r.lease)); err != nil {
			return launch.Round{}, r.wrap(err)
		}
		rd, ok, err := r.await(ctx, ver, rp)
		if err != nil {
			return launch.Round{}, err
		}
		if ok {
			rd.Secret = secret
			return rd, nil
		}
		// The round moved on while gathering: leave it and join the new one.
		r.cli.Delete(ctx, rp+"node/"+r.id)
	}
}

// await waits until round ver completes (ok) or ends before completing (!ok).
func (r *Rendezvous) await(ctx context.Context, ver int64, rp string) (launch.Round, bool, error) {
	for {
		nodes, err := r.cli.Get(ctx, rp+"node/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return launch.Round{}, false, r.wrap(err)
		}
		rev := nodes.Header.Revision
		if len(nodes.Kvs) >= r.cfg.NNodes {
			var ids []string
			for _, kv := range nodes.Kvs[:r.cfg.NNodes] {
				ids = append(ids, strings.TrimPrefix(string(kv.Key), rp+"node/"))
			}
			// Exactly one node writes the membership; everyone reads the winner's.
			tx, err := r.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(rp+"final"), "=", 0)).
				Then(clientv3.OpPut(rp+"final", strings.Join(ids, ","))).
				Else(clientv3.OpGet(rp + "final")).Commit()
			if err != nil {
				return launch.Round{}, false, r.wrap(err)
			}
			if !tx.Succeeded {
				ids = strings.Split(string(tx.Responses[0].GetResponseRange().Kvs[0].Value), ",")
			}
			return r.complete(ctx, ver, rp, ids)
		}
		if cur, err := r.current(ctx); err != nil || cur != ver {
			return launch.Round{}, false, err
		}
		// Sleep until anything under the run changes (a node joins, the round moves on).
		wctx, cancel := context.WithCancel(ctx)
		wch := r.cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		select {
		case <-wch:
		case <-ctx.Done():
		}
		cancel()
		if ctx.Err() != nil {
			return launch.Round{}, false, fmt.Errorf("etcdrdzv: run %s round %d: %d of %d nodes joined: %w",
				r.cfg.RunID, ver, len(nodes.Kvs), r.cfg.NNodes, ctx.Err())
		}
	}
}

// complete turns the membership of round ver into this node's Round and starts watching
// for the round's end.
func (r *Rendezvous) complete(ctx context.Context, ver int64, rp string, ids []string) (launch.Round, bool, error) {
	rank := slices.Index(ids, r.id)
	if rank < 0 {
		// More nodes than needed joined and this one came late: wait for the next round.
		return launch.Round{}, false, fmt.Errorf("etcdrdzv: run %s round %d completed with %d other nodes; this node (%s) is surplus", r.cfg.RunID, ver, len(ids), r.id)
	}
	master, err := r.cli.Get(ctx, rp+"node/"+ids[0])
	if err != nil {
		return launch.Round{}, false, r.wrap(err)
	}
	if len(master.Kvs) == 0 {
		// Node 0 vanished already: end the round and gather again.
		return launch.Round{}, false, r.bump(ctx, ver)
	}
	host, port, err := net.SplitHostPort(string(master.Kvs[0].Value))
	if err != nil {
		return launch.Round{}, false, fmt.Errorf("etcdrdzv: node %s registered %q: %w", ids[0], master.Kvs[0].Value, err)
	}
	p, _ := strconv.Atoi(port)
	changed := make(chan struct{})
	r.wg.Add(1)
	go r.watchEnd(ver, rp, ids, master.Header.Revision, changed)
	return launch.Round{Version: ver, NodeRank: rank, NNodes: len(ids), MasterAddr: host, MasterPort: p, Changed: changed}, true, nil
}

// watchEnd closes changed when round ver ends: the round key moves on, or a member's
// registration disappears (its node died: the round is ended on its behalf).
func (r *Rendezvous) watchEnd(ver int64, rp string, ids []string, rev int64, changed chan struct{}) {
	defer r.wg.Done()
	defer close(changed)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(r.cliCtx(), cancel)
	defer stop()
	for resp := range r.cli.Watch(ctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if resp.Err() != nil {
			return
		}
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			switch {
			case key == r.prefix+"round":
				if v, _ := strconv.ParseInt(string(ev.Kv.Value), 10, 64); v != ver {
					return
				}
			case ev.Type == clientv3.EventTypeDelete && strings.HasPrefix(key, rp+"node/") &&
				slices.Contains(ids, strings.TrimPrefix(key, rp+"node/")):
				bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
				r.bump(bctx, ver)
				bcancel()
				return
			}
		}
	}
}

func (r *Rendezvous) cliCtx() context.Context { return r.cli.Ctx() }

// Fail ends round rd for every node.
func (r *Rendezvous) Fail(ctx context.Context, rd launch.Round) error {
	return r.bump(ctx, rd.Version)
}

// Done is the exit barrier (launch.Finisher): it records that this node's workers all
// succeeded in round rd and returns once every node of the round has, or once the round
// has ended (another node failed after this one finished). Until then this node keeps its
// registration, so its leaving cannot end the round while other nodes' workers still run.
func (r *Rendezvous) Done(ctx context.Context, rd launch.Round) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	rp := r.prefix + "r" + strconv.FormatInt(rd.Version, 10) + "/"
	if _, err := r.cli.Put(ctx, rp+"done/"+r.id, "ok"); err != nil {
		return r.wrap(err)
	}
	for {
		resp, err := r.cli.Get(ctx, rp+"done/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return r.wrap(err)
		}
		if int(resp.Count) >= rd.NNodes {
			return nil
		}
		if ver, err := r.current(ctx); err != nil {
			return err
		} else if ver != rd.Version {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdrdzv: run %s round %d: %d of %d nodes finished: %w", r.cfg.RunID, rd.Version, resp.Count, rd.NNodes, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// current returns the round number, creating it (0) on the run's first node.
func (r *Rendezvous) current(ctx context.Context) (int64, error) {
	key := r.prefix + "round"
	tx, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "0")).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, r.wrap(err)
	}
	if tx.Succeeded {
		return 0, nil
	}
	return strconv.ParseInt(string(tx.Responses[0].GetResponseRange().Kvs[0].Value), 10, 64)
}

// bump moves the round from ver to ver+1 unless another node already moved it.
func (r *Rendezvous) bump(ctx context.Context, ver int64) error {
	key := r.prefix + "round"
	_, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", strconv.FormatInt(ver, 10))).
		Then(clientv3.OpPut(key, strconv.FormatInt(ver+1, 10))).Commit()
	return r.wrap(err)
}

// secret returns the run's rendezvous secret, created by the first node to ask.
func (r *Rendezvous) secret(ctx context.Context) (string, error) {
	key := r.prefix + "secret"
	tx, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, launch.RandomHex(16))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return "", r.wrap(err)
	}
	if tx.Succeeded {
		return r.secret(ctx)
	}
	return string(tx.Responses[0].GetResponseRange().Kvs[0].Value), nil
}

func (r *Rendezvous) wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("etcdrdzv: etcd at %v: %w (is etcd running?)", r.cfg.Endpoints, err)
	}
	return fmt.Errorf("etcdrdzv: etcd at %v: %w", r.cfg.Endpoints, err)
}
