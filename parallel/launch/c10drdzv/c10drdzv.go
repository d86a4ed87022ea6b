// Package c10drdzv is gprun's multi-node rendezvous without etcd (launch.Rendezvous), after
// torchrun's c10d backend: the node whose address is the endpoint hosts a store (package store's
// StoreServer) there, and every node, that one included, joins numbered rounds through it.
// Rounds are elastic between MinNodes and MaxNodes.
//
// Note [c10d rounds]: the store offers Set, Get and an atomic Add, not compare-and-swap, so
// one process decides: the coordinator, a goroutine of the node that hosts the store (as in
// torchrun, that node is the job's single point of failure). Keys, under c10d/<run id>/:
//
//	round               the open round (a counter; only the coordinator bumps it)
//	r<v>/n              join counter: a node's join index is the value Add returned, minus 1
//	r<v>/node/<idx>     the node's registration (JSON: id, master address, nproc, command)
//	r<v>/final          the completed round (JSON: members in node-rank order, refusals,
//	                    the workers' secret), then r<v>/closed is set to 1
//	r<v>/hb/<rank>      heartbeat counter of a member
//	r<v>/failed         members whose workers failed; r<v>/late nodes waiting to join
//	r<v>/ended          why the coordinator ended round v, set before it bumps round
//	r<v>/done, r<v>/bye the exit barrier
//
// A round completes when MaxNodes have joined, or MinNodes have and no node joined for
// LastCall. The coordinator ends a completed round when a member's workers fail (a restart
// that counts against --max-restarts), when a member's heartbeats stop (it is lost; the job
// continues with the others when they are at least MinNodes), or when a node is waiting
// and the round has fewer than MaxNodes (it is taken in). Nodes poll the round every
// Interval (gprun's --monitor-interval).
package c10drdzv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/auth"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/launch"
)

// Config configures a node's rendezvous.
type Config struct {
	// Endpoint is the store's host:port (torchrun's --rdzv-endpoint; port default 29400).
	Endpoint string
	// RunID names the job; nodes of one job share it.
	RunID string
	// MinNodes and MaxNodes bound a round (--nnodes MIN:MAX; equal for a fixed size).
	MinNodes, MaxNodes int
	// LocalAddr is the address other nodes reach this node at, published as the master
	// address when it gets node rank 0 (default: the local address of the route to the
	// endpoint).
	LocalAddr string
	// Secret protects the store; every node needs the same. SecretFrom says where it came
	// from ("GP_RDZV_SECRET", "--rdzv-secret"), for error messages.
	Secret, SecretFrom string
	// NProc and Command describe this node's workers; a node whose differ from node 0's is
	// refused with an error naming both.
	NProc   int
	Command []string
	// Host: "" decides by address (the endpoint's host is one of this machine's addresses,
	// then whichever node binds the port first), "true" or "false" force it (torchrun's
	// is_host).
	Host string
	// Interval is how often a node polls the round (default 100ms); KeepAlive how often it
	// sends a heartbeat (default 5s) and KeepAliveMisses how many may be missed before the
	// node counts as lost (default 3); LastCall how long a round with at least MinNodes
	// waits for more (default 30s); JoinTimeout how long Next waits (default 10 minutes).
	Interval, KeepAlive, LastCall, JoinTimeout time.Duration
	KeepAliveMisses                            int
	// Log receives the coordinator's decisions (default: discarded).
	Log func(format string, args ...any)
}

// DefaultPort is the endpoint's port when it names none (torchrun's).
const DefaultPort = 29400

// Rendezvous is a node's handle on the run's rounds. Close it to leave.
type Rendezvous struct {
	cfg    Config
	st     *store.Store
	server *store.Server // on the hosting node
	prefix string
	id     string

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	last   int64 // the last round this node completed, -1 before the first
}

var _ launch.Rendezvous = (*Rendezvous)(nil)
var _ launch.Finisher = (*Rendezvous)(nil)

// New connects to the store at the endpoint, hosting it (and the coordinator) when the
// endpoint is this machine's and its port is free.
func New(ctx context.Context, cfg Config) (*Rendezvous, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(cfg.Endpoint)
	r := &Rendezvous{cfg: cfg, prefix: "c10d/" + cfg.RunID + "/", last: -1}
	hn, _ := os.Hostname()
	r.id = fmt.Sprintf("%s-%d-%s", hn, os.Getpid(), launch.RandomHex(3))
	opts := []store.Option{store.WithSecret(cfg.Secret), store.WithTimeout(cfg.JoinTimeout)}
	if cfg.Host == "true" || cfg.Host == "" && isLocal(host) {
		listen := cfg.Endpoint
		if ip := net.ParseIP(host); ip == nil && host != "localhost" {
			listen = net.JoinHostPort("", portOf(cfg.Endpoint))
		}
		srv, err := store.Listen(listen, 0, opts...)
		switch {
		case err == nil:
			r.server = srv
			cfg.Log("c10d rendezvous: hosting the store on %s (run %s, nodes %d:%d, secret from %s, fingerprint %s)",
				srv.Addr(), cfg.RunID, cfg.MinNodes, cfg.MaxNodes, cfg.SecretFrom, Fingerprint(cfg.Secret))
		case cfg.Host == "true" || !errors.Is(err, syscall.EADDRINUSE):
			return nil, fmt.Errorf("c10drdzv: %w", err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.JoinTimeout)
	defer cancel()
	st, err := store.Dial(dctx, cfg.Endpoint, opts...)
	if err != nil {
		if r.server != nil {
			r.server.Close()
		}
		if errors.Is(err, auth.ErrFailed) {
			return nil, fmt.Errorf("c10drdzv: the store at %s refused this node's secret (from %s, fingerprint %s): every node of run %s needs the hosting node's secret (its fingerprint is in its log): %w",
				cfg.Endpoint, cfg.SecretFrom, Fingerprint(cfg.Secret), cfg.RunID, err)
		}
		return nil, fmt.Errorf("c10drdzv: %w (is a node running on %s? the first node whose address it is hosts the store)", err, cfg.Endpoint)
	}
	r.st = st
	cctx, ccancel := context.WithCancel(context.Background())
	r.ctx, r.cancel = cctx, ccancel
	if r.server != nil {
		co, err := store.Dial(dctx, cfg.Endpoint, opts...)
		if err != nil {
			st.Close()
			r.server.Close()
			return nil, fmt.Errorf("c10drdzv: coordinator: %w", err)
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer co.Close()
			(&coordinator{cfg: cfg, st: co, prefix: r.prefix}).run(cctx)
		}()
	}
	return r, nil
}

func (c *Config) defaults() error {
	if c.RunID == "" || strings.ContainsAny(c.RunID, "/ ") {
		return fmt.Errorf("c10drdzv: run id %q: need a non-empty id without '/' or spaces (--rdzv-id)", c.RunID)
	}
	if c.MinNodes < 1 || c.MaxNodes < c.MinNodes {
		return fmt.Errorf("c10drdzv: nodes %d:%d: need 1 <= MIN <= MAX", c.MinNodes, c.MaxNodes)
	}
	if _, _, err := net.SplitHostPort(c.Endpoint); err != nil {
		c.Endpoint = net.JoinHostPort(c.Endpoint, strconv.Itoa(DefaultPort))
	}
	if c.Interval <= 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 5 * time.Second
	}
	if c.KeepAliveMisses <= 0 {
		c.KeepAliveMisses = 3
	}
	if c.LastCall <= 0 {
		c.LastCall = 30 * time.Second
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = 10 * time.Minute
	}
	if c.LocalAddr == "" {
		c.LocalAddr = launch.RouteAddr(c.Endpoint)
	}
	if c.Log == nil {
		c.Log = func(string, ...any) {}
	}
	return nil
}

// Fingerprint is a short hash of a secret, to compare secrets in logs without showing them.
func Fingerprint(secret string) string {
	h := sha256.Sum256([]byte("gp-rdzv-fingerprint\x00" + secret))
	return hex.EncodeToString(h[:4])
}

// registration is a node's entry in a round.
type registration struct {
	ID      string   `json:"id"`
	Addr    string   `json:"addr"` // host:port of the store its rank 0 would host
	NProc   int      `json:"nproc"`
	Command []string `json:"command"`
}

// final is a completed round.
type final struct {
	Members []int          `json:"members"` // join indexes, in node-rank order
	Refused map[int]string `json:"refused,omitempty"`
	Secret  string         `json:"secret"`
}

// masterOf reads node 0's registration: the host and port of the store its rank 0 hosts.
// Errors quote what was registered.
func masterOf(b []byte) (host string, port int, err error) {
	var master registration
	if err := json.Unmarshal(b, &master); err != nil {
		return "", 0, fmt.Errorf("node 0's registration %.200q is unreadable: %w", b, err)
	}
	host, port0, err := net.SplitHostPort(master.Addr)
	if err != nil {
		return "", 0, fmt.Errorf("node 0 registered the address %.200q: %w", master.Addr, err)
	}
	port, err = strconv.Atoi(port0)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("node 0 registered the address %.200q, not a host and a port in 1-65535", master.Addr)
	}
	return host, port, nil
}

func (r *Rendezvous) key(v int64, rest string) string {
	return r.prefix + "r" + strconv.FormatInt(v, 10) + "/" + rest
}

// Next joins the open round and waits for it to complete; see Note [c10d rounds].
func (r *Rendezvous) Next(ctx context.Context) (launch.Round, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.JoinTimeout)
	defer cancel()
	for {
		v, err := r.st.Add(ctx, r.prefix+"round", 0)
		if err != nil {
			return launch.Round{}, r.wrap(ctx, err)
		}
		closed, err := r.st.Add(ctx, r.key(v, "closed"), 0)
		if err != nil {
			return launch.Round{}, r.wrap(ctx, err)
		}
		if closed > 0 {
			// Completed without this node: wait to be taken in.
			if err := r.waitLate(ctx, v); err != nil {
				return launch.Round{}, err
			}
			continue
		}
		n, err := r.st.Add(ctx, r.key(v, "n"), 1)
		if err != nil {
			return launch.Round{}, r.wrap(ctx, err)
		}
		idx := int(n - 1)
		port, err := launch.FreePort(r.cfg.LocalAddr)
		if err != nil {
			return launch.Round{}, fmt.Errorf("c10drdzv: master port (--local-addr): %w", err)
		}
		reg, _ := json.Marshal(registration{ID: r.id, Addr: net.JoinHostPort(r.cfg.LocalAddr, strconv.Itoa(port)),
			NProc: r.cfg.NProc, Command: r.cfg.Command})
		if err := r.st.Set(ctx, r.key(v, "node/"+strconv.Itoa(idx)), reg); err != nil {
			return launch.Round{}, r.wrap(ctx, err)
		}
		if err := r.poll(ctx, func() (bool, error) {
			c, err := r.st.Add(ctx, r.key(v, "closed"), 0)
			return c > 0, err
		}); err != nil {
			return launch.Round{}, fmt.Errorf("c10drdzv: run %s round %d: waiting for %d to %d nodes: %w", r.cfg.RunID, v, r.cfg.MinNodes, r.cfg.MaxNodes, r.wrap(ctx, err))
		}
		var fin final
		if b, err := r.st.Get(ctx, r.key(v, "final")); err != nil {
			return launch.Round{}, r.wrap(ctx, err)
		} else if err := json.Unmarshal(b, &fin); err != nil {
			return launch.Round{}, fmt.Errorf("c10drdzv: round %d: %w", v, err)
		}
		if why, ok := fin.Refused[idx]; ok {
			return launch.Round{}, fmt.Errorf("c10drdzv: run %s refused this node: %s", r.cfg.RunID, why)
		}
		rank := slices.Index(fin.Members, idx)
		if rank < 0 {
			// More than MaxNodes joined: surplus until a place frees up.
			continue
		}
		b, err := r.st.Get(ctx, r.key(v, "node/"+strconv.Itoa(fin.Members[0])))
		if err != nil {
			return launch.Round{}, r.wrap(ctx, err)
		}
		host, p, err := masterOf(b)
		if err != nil {
			return launch.Round{}, fmt.Errorf("c10drdzv: run %s round %d: %w", r.cfg.RunID, v, err)
		}
		changed := make(chan struct{})
		var endMu sync.Mutex
		var endFailed bool
		var endWhy string
		r.mu.Lock()
		r.last = v
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			failed, why := r.watch(r.ctx, v, rank)
			endMu.Lock()
			endFailed, endWhy = failed, why
			endMu.Unlock()
			close(changed)
		}()
		return launch.Round{Version: v, NodeRank: rank, NNodes: len(fin.Members), MasterAddr: host, MasterPort: p,
			Secret: fin.Secret, Changed: changed, Ended: func() (bool, string) {
				endMu.Lock()
				defer endMu.Unlock()
				return endFailed, endWhy
			}}, nil
	}
}

// waitLate registers this node as waiting for round v to end and waits for it.
func (r *Rendezvous) waitLate(ctx context.Context, v int64) error {
	if _, err := r.st.Add(ctx, r.key(v, "late"), 1); err != nil {
		return r.wrap(ctx, err)
	}
	err := r.poll(ctx, func() (bool, error) {
		cur, err := r.st.Add(ctx, r.prefix+"round", 0)
		return cur != v, err
	})
	if err != nil {
		return fmt.Errorf("c10drdzv: run %s: waiting to join (round %d is complete with the maximum of nodes): %w", r.cfg.RunID, v, r.wrap(ctx, err))
	}
	return nil
}

// watch heartbeats for member rank of round v and returns once the round ends, with why.
func (r *Rendezvous) watch(ctx context.Context, v int64, rank int) (failed bool, why string) {
	hb := time.NewTicker(r.cfg.KeepAlive)
	defer hb.Stop()
	poll := time.NewTicker(r.cfg.Interval)
	defer poll.Stop()
	beat := func() { r.st.Add(ctx, r.key(v, "hb/"+strconv.Itoa(rank)), 1) }
	beat()
	for {
		select {
		case <-ctx.Done():
			return false, "this node left"
		case <-hb.C:
			beat()
		case <-poll.C:
			cur, err := r.st.Add(ctx, r.prefix+"round", 0)
			if err != nil {
				if ctx.Err() != nil {
					return false, "this node left"
				}
				return true, fmt.Sprintf("the rendezvous store at %s is gone: %v", r.cfg.Endpoint, err)
			}
			if cur != v {
				gctx, cancel := context.WithTimeout(ctx, time.Second)
				b, _ := r.st.Get(gctx, r.key(v, "ended"))
				cancel()
				s := string(b)
				return !strings.HasPrefix(s, "membership: "), strings.TrimPrefix(strings.TrimPrefix(s, "membership: "), "failure: ")
			}
		}
	}
}

// poll calls done every Interval until it reports true, fails, or ctx ends.
func (r *Rendezvous) poll(ctx context.Context, done func() (bool, error)) error {
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.cfg.Interval):
		}
	}
}

// Fail asks the coordinator to end round rd: this node's workers failed.
func (r *Rendezvous) Fail(ctx context.Context, rd launch.Round) error {
	_, err := r.st.Add(ctx, r.key(rd.Version, "failed/"+strconv.Itoa(rd.NodeRank)), 1)
	if err == nil {
		_, err = r.st.Add(ctx, r.key(rd.Version, "failed"), 1)
	}
	return r.wrap(ctx, err)
}

// Done is the exit barrier (launch.Finisher): it returns once every member of round rd has
// finished, or the round ended.
func (r *Rendezvous) Done(ctx context.Context, rd launch.Round) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.JoinTimeout)
	defer cancel()
	if _, err := r.st.Add(ctx, r.key(rd.Version, "done"), 1); err != nil {
		return r.wrap(ctx, err)
	}
	err := r.poll(ctx, func() (bool, error) {
		n, err := r.st.Add(ctx, r.key(rd.Version, "done"), 0)
		if err != nil || int(n) >= rd.NNodes {
			return true, err
		}
		cur, err := r.st.Add(ctx, r.prefix+"round", 0)
		return cur != rd.Version, err
	})
	if err != nil {
		return fmt.Errorf("c10drdzv: run %s round %d: waiting for the other nodes to finish: %w", r.cfg.RunID, rd.Version, r.wrap(ctx, err))
	}
	r.st.Add(ctx, r.key(rd.Version, "bye"), 1)
	return nil
}

// Close leaves the rendezvous. The hosting node first waits (at most 10 s) for the other
// members of its last round to pass the exit barrier, so that they do not lose the store
// while they finish.
func (r *Rendezvous) Close() error {
	if r.server != nil {
		r.mu.Lock()
		v := r.last
		r.mu.Unlock()
		if v >= 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if done, _ := r.st.Add(ctx, r.key(v, "done"), 0); done > 0 {
				b, _ := r.st.Get(ctx, r.key(v, "final"))
				var fin final
				json.Unmarshal(b, &fin)
				r.poll(ctx, func() (bool, error) {
					n, err := r.st.Add(ctx, r.key(v, "bye"), 0)
					return int(n) >= len(fin.Members), err
				})
			}
			cancel()
		}
	}
	r.cancel()
	err := r.st.Close()
	r.wg.Wait()
	if r.server != nil {
		err = errors.Join(err, r.server.Close())
	}
	return err
}

func (r *Rendezvous) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("c10drdzv: store at %s: %w", r.cfg.Endpoint, ctx.Err())
	}
	return fmt.Errorf("c10drdzv: store at %s: %w", r.cfg.Endpoint, err)
}

// isLocal reports whether host names this machine: a loopback or local interface address,
// or the machine's name.
func isLocal(host string) bool {
	if host == "localhost" {
		return true
	}
	if hn, _ := os.Hostname(); hn != "" && (strings.EqualFold(host, hn) || strings.EqualFold(strings.SplitN(hn, ".", 2)[0], host)) {
		return true
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		addrs, err := net.LookupIP(host)
		if err != nil {
			return false
		}
		ips = addrs
	}
	ifAddrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range ifAddrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

func portOf(endpoint string) string {
	_, p, _ := net.SplitHostPort(endpoint)
	return p
}

// commandKey is how commands are compared across nodes: the program's base name (nodes may
// keep it in different directories) and the arguments.
func commandKey(cmd []string) string {
	if len(cmd) == 0 {
		return ""
	}
	return strings.Join(append([]string{filepath.Base(cmd[0])}, cmd[1:]...), " ")
}
