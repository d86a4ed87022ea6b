package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/launch"
	"github.com/gorgonia-parallel/gp/parallel/launch/c10drdzv"
	"github.com/gorgonia-parallel/gp/parallel/launch/etcdrdzv"
)

// configure turns gprun's command line and environment into the launcher's configuration
// and, for a rendezvous backend, the rendezvous (the caller closes it). code is the exit
// code to return at once (2 for bad usage, 1 for a failure), or -1 to go on.
func configure(ctx context.Context, args []string, stderr io.Writer) (cfg launch.Config, rdzv io.Closer, code int) {
	fs := flag.NewFlagSet("gprun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, def, usage string, names ...string) {
		for i, n := range names {
			u := usage
			if i > 0 {
				u = "alias of --" + names[0]
			}
			fs.StringVar(p, n, def, u)
		}
	}
	num := func(p *int, def int, usage string, names ...string) {
		for i, n := range names {
			u := usage
			if i > 0 {
				u = "alias of --" + names[0]
			}
			fs.IntVar(p, n, def, u)
		}
	}
	var nproc, nnodes, backend, endpoint, localAddr, conf, monitor, redirects, tee, backoff, termTimeout string
	var standalone bool
	str(&nproc, "1", "workers on this node: N, gpu, cpu or auto", "nproc-per-node", "nproc_per_node")
	str(&nnodes, "1", "number of nodes: N, or MIN:MAX (elastic, c10d backend)", "nnodes")
	num(&cfg.NodeRank, 0, "rank of this node (static backend)", "node-rank", "node_rank")
	str(&cfg.MasterAddr, "127.0.0.1", "address of rank 0's node (static backend)", "master-addr", "master_addr")
	num(&cfg.MasterPort, 0, "port of rank 0's store (0: pick a free one; single node only)", "master-port", "master_port")
	num(&cfg.MaxRestarts, 0, "restarts of the workers after a failure", "max-restarts", "max_restarts")
	str(&backoff, "1", "seconds before the first restart, doubling after each attempt that failed within a minute, up to 30 (0: restart at once)", "restart-backoff", "restart_backoff")
	str(&termTimeout, "5", "seconds between SIGTERM and SIGKILL when gprun stops the workers (0: SIGKILL at once)", "term-timeout", "term_timeout")
	str(&cfg.RunID, "", "job id (TORCHELASTIC_RUN_ID; default random, or \"none\" for c10d as torchrun)", "rdzv-id", "rdzv_id", "run-id")
	str(&cfg.Secret, "", "rendezvous secret (default GP_RDZV_SECRET or random)", "rdzv-secret", "rdzv_secret")
	str(&backend, "static", "rendezvous backend: static (rank 0 hosts the store), c10d (the endpoint's node hosts it) or etcd", "rdzv-backend", "rdzv_backend")
	str(&endpoint, "", "rendezvous endpoint: c10d's HOST[:PORT], etcd's host:port[,host:port...]", "rdzv-endpoint", "rdzv_endpoint")
	str(&conf, "", "rendezvous settings key=value,... (c10d: join_timeout, last_call_timeout, keep_alive_interval, keep_alive_max_attempt, is_host)", "rdzv-conf", "rdzv_conf")
	str(&localAddr, "", "address other nodes reach this node at (default: the route to the endpoint)", "local-addr", "local_addr", "rdzv-host")
	fs.BoolVar(&standalone, "standalone", false, "a single node with a rendezvous of its own on a free port")
	str(&cfg.LogDir, "", "directory of the workers' log files (see --redirects and --tee)", "log-dir", "log_dir")
	str(&redirects, "", "streams written to the log files only: 0 none, 1 stdout, 2 stderr, 3 both, or LOCAL_RANK:N,...", "redirects", "r")
	str(&tee, "", "streams written to the log files as well as the console (as --redirects)", "tee", "t")
	str(&monitor, "0.1", "seconds between the rendezvous' checks for lost and joining nodes (workers' exits are seen at once)", "monitor-interval", "monitor_interval")
	if err := fs.Parse(args); err != nil {
		return cfg, nil, 2
	}
	usage := func(format string, a ...any) (launch.Config, io.Closer, int) {
		fmt.Fprintf(stderr, "gprun: "+format+"\n", a...)
		return cfg, nil, 2
	}
	if fs.NArg() == 0 {
		return usage("no program given; usage: gprun --nproc-per-node N -- PROGRAM ARGS...")
	}
	cli := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cli[canonical(f.Name)] = true })
	from, err := envDefaults(fs, cli, os.Getenv)
	if err != nil {
		return usage("%v", err)
	}
	source := func(name string) string {
		if cli[name] {
			return "--" + name
		}
		return from[name]
	}
	n, note, err := nprocPerNode(nproc, os.LookupEnv)
	if err != nil {
		return usage("%v", err)
	}
	if note != "" {
		fmt.Fprintf(stderr, "gprun: %s\n", note)
	}
	cfg.NProcPerNode = n
	lo, hi, err := parseNNodes(nnodes)
	if err != nil {
		return usage("%v", err)
	}
	cfg.NNodes = hi
	if cfg.Redirects, err = launch.ParseStreams(redirects); err != nil {
		return usage("--redirects: %v", err)
	}
	if cfg.Tee, err = launch.ParseStreams(tee); err != nil {
		return usage("--tee: %v", err)
	}
	interval, err := seconds(monitor)
	if err != nil || interval == 0 {
		return usage("--monitor-interval %q: want a positive number of seconds", monitor)
	}
	if cfg.RestartBackoff, err = seconds(backoff); err != nil {
		return usage("--restart-backoff: %v", err)
	}
	grace, err := seconds(termTimeout)
	if err != nil {
		return usage("--term-timeout: %v", err)
	}
	cfg.StopGrace = grace
	if grace == 0 {
		cfg.StopGrace = -1 // launch's zero is its default of 5 s
	}
	cfg.Program, cfg.Args = fs.Arg(0), fs.Args()[1:]

	if standalone {
		if hi > 1 {
			return usage("--standalone runs one node, but --nnodes is %s (from %s)", nnodes, source("nnodes"))
		}
		backend, cfg.MasterAddr, cfg.MasterPort = "static", "127.0.0.1", 0
	}
	switch backend {
	case "static":
		if lo != hi {
			return usage("--nnodes %s is elastic: it needs --rdzv-backend c10d", nnodes)
		}
		if code := fromSLURM(&cfg, source, stderr); code >= 0 {
			return cfg, nil, code
		}
		return cfg, nil, -1
	case "c10d":
		if endpoint == "" {
			if hi == 1 {
				return cfg, nil, -1 // one node: its own store, as --standalone
			}
			return usage("--rdzv-backend c10d with --nnodes %s needs --rdzv-endpoint HOST:PORT (the node at HOST hosts the rendezvous)", nnodes)
		}
		return c10dRendezvous(ctx, &cfg, lo, hi, endpoint, localAddr, conf, interval, source, stderr)
	case "etcd", "etcd-v2":
		if lo != hi {
			return usage("the etcd backend needs a fixed --nnodes; --nnodes %s (elastic) needs --rdzv-backend c10d", nnodes)
		}
		if endpoint == "" || cfg.RunID == "" {
			return usage("the etcd backend needs --rdzv-endpoint and a --rdzv-id shared by the job's nodes")
		}
		rd, err := etcdrdzv.New(ctx, etcdrdzv.Config{Endpoints: strings.Split(endpoint, ","), RunID: cfg.RunID,
			NNodes: hi, Host: localAddr})
		if err != nil {
			fmt.Fprintf(stderr, "gprun: %v\n", err)
			return cfg, nil, 1
		}
		cfg.Rendezvous = rd
		return cfg, rd, -1
	}
	return usage("rendezvous backend %q is not implemented (use static, c10d or etcd)", backend)
}

// fromSLURM gives a static job started by srun, one gprun task per node, its node rank,
// node count and master from SLURM where the flags leave them out; a flag that disagrees
// with SLURM is an error naming both.
func fromSLURM(cfg *launch.Config, source func(string) string, stderr io.Writer) int {
	role, ok, err := slurmTasks()
	if err != nil {
		fmt.Fprintf(stderr, "gprun: started by srun, but %v\n", err)
		return 2
	}
	if !ok {
		return -1
	}
	for _, c := range []struct {
		flag, env string
		have      *int
		slurm     int
	}{{"nnodes", "SLURM_NTASKS", &cfg.NNodes, role.nnodes}, {"node-rank", "SLURM_PROCID", &cfg.NodeRank, role.nodeRank}} {
		if src := source(c.flag); src != "" && *c.have != c.slurm {
			fmt.Fprintf(stderr, "gprun: --%s %d (from %s) but %s=%d: srun started %d gprun tasks, one per node; "+
				"leave --%s out or make it agree (srun --ntasks-per-node=1 starts one gprun per node)\n",
				c.flag, *c.have, src, c.env, c.slurm, role.nnodes, c.flag)
			return 2
		}
		*c.have = c.slurm
	}
	if source("master-addr") == "" {
		cfg.MasterAddr = role.master
	}
	if source("master-port") == "" {
		cfg.MasterPort = role.port
	}
	return -1
}

// c10dRendezvous starts the c10d rendezvous (see parallel/launch/c10drdzv).
func c10dRendezvous(ctx context.Context, cfg *launch.Config, lo, hi int, endpoint, localAddr, conf string,
	interval time.Duration, source func(string) string, stderr io.Writer) (launch.Config, io.Closer, int) {
	kv, err := rdzvConf(conf)
	if err != nil {
		fmt.Fprintf(stderr, "gprun: %v\n", err)
		return *cfg, nil, 2
	}
	if cfg.RunID == "" {
		cfg.RunID = "none" // torchrun's default
	}
	rc := c10drdzv.Config{Endpoint: endpoint, RunID: cfg.RunID, MinNodes: lo, MaxNodes: hi, LocalAddr: localAddr,
		NProc: cfg.NProcPerNode, Command: append([]string{cfg.Program}, cfg.Args...), Interval: interval,
		Log: func(format string, a ...any) { fmt.Fprintf(stderr, "gprun: "+format+"\n", a...) }}
	for k, v := range kv {
		var d time.Duration
		if k != "is_host" && k != "keep_alive_max_attempt" {
			if d, err = seconds(v); err != nil {
				fmt.Fprintf(stderr, "gprun: --rdzv-conf %s: %v\n", k, err)
				return *cfg, nil, 2
			}
		}
		switch k {
		case "join_timeout":
			rc.JoinTimeout = d
		case "last_call_timeout":
			rc.LastCall = d
		case "keep_alive_interval":
			rc.KeepAlive = d
		case "keep_alive_max_attempt":
			if rc.KeepAliveMisses, err = strconv.Atoi(v); err != nil || rc.KeepAliveMisses < 1 {
				fmt.Fprintf(stderr, "gprun: --rdzv-conf keep_alive_max_attempt=%q: want a positive count\n", v)
				return *cfg, nil, 2
			}
		case "is_host":
			switch strings.ToLower(v) {
			case "1", "true", "yes":
				rc.Host = "true"
			case "0", "false", "no":
				rc.Host = "false"
			default:
				fmt.Fprintf(stderr, "gprun: --rdzv-conf is_host=%q: want true or false\n", v)
				return *cfg, nil, 2
			}
		default:
			fmt.Fprintf(stderr, "gprun: --rdzv-conf %s: unknown (c10d reads join_timeout, last_call_timeout, keep_alive_interval, keep_alive_max_attempt, is_host)\n", k)
			return *cfg, nil, 2
		}
	}
	switch {
	case cfg.Secret != "":
		rc.Secret, rc.SecretFrom = cfg.Secret, source("rdzv-secret")
	case os.Getenv("GP_RDZV_SECRET") != "":
		rc.Secret, rc.SecretFrom = os.Getenv("GP_RDZV_SECRET"), "GP_RDZV_SECRET"
	default:
		rc.Secret, rc.SecretFrom = "gp-c10d-run:"+cfg.RunID, "the run id (no GP_RDZV_SECRET or --rdzv-secret)"
	}
	rd, err := c10drdzv.New(ctx, rc)
	if err != nil {
		fmt.Fprintf(stderr, "gprun: %v\n", err)
		return *cfg, nil, 1
	}
	cfg.Rendezvous = rd
	return *cfg, rd, -1
}
