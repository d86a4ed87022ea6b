// Command gprun launches the worker processes of a distributed job with the torchrun
// environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...), prefixes their output with
// their rank, forwards SIGINT/SIGTERM, and restarts them after a failure.
//
//	gprun --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//	      [--max-restarts K] -- PROGRAM ARGS...
//	gprun --nproc-per-node N --nnodes M --rdzv-backend etcd --rdzv-endpoint HOST:PORT
//	      --run-id ID [--max-restarts K] -- PROGRAM ARGS...
//
// When a worker exits non-zero, gprun stops the others (SIGTERM, then SIGKILL 5 s later),
// prints the failure once (rank, exit status and the last lines of its stderr) and restarts
// them all while --max-restarts allows; it exits with the failed worker's exit code. The
// workers die with gprun, even a SIGKILLed one: on Linux through the parent-death signal,
// elsewhere through a pipe the workers inherit (comm.InitFromEnv watches it; see
// comm.LauncherPipeEnv).
//
// On a single node the master port is picked free and the rendezvous secret
// (GP_RDZV_SECRET) generated; several nodes need --master-port and a shared secret
// (GP_RDZV_SECRET in the launcher's environment, or --rdzv-secret). With the etcd backend
// the nodes find each other through etcd under the run id: node ranks, the master and the
// secret come from the rendezvous, and when any node's workers fail every node restarts
// its workers in a new round (see parallel/launch/etcdrdzv).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gorgonia-parallel/gp/parallel/launch"
	"github.com/gorgonia-parallel/gp/parallel/launch/etcdrdzv"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, sigs))
}

// run is gprun with its arguments, output and signals explicit; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	fs := flag.NewFlagSet("gprun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg launch.Config
	fs.IntVar(&cfg.NProcPerNode, "nproc-per-node", 1, "worker processes on this node")
	fs.IntVar(&cfg.NProcPerNode, "nproc_per_node", 1, "alias of --nproc-per-node")
	fs.IntVar(&cfg.NNodes, "nnodes", 1, "number of nodes")
	fs.IntVar(&cfg.NodeRank, "node-rank", 0, "rank of this node")
	fs.IntVar(&cfg.NodeRank, "node_rank", 0, "alias of --node-rank")
	fs.StringVar(&cfg.MasterAddr, "master-addr", "127.0.0.1", "address of rank 0's node")
	fs.StringVar(&cfg.MasterAddr, "master_addr", "127.0.0.1", "alias of --master-addr")
	fs.IntVar(&cfg.MasterPort, "master-port", 0, "port of rank 0's store (0: pick a free one; single node only)")
	fs.IntVar(&cfg.MasterPort, "master_port", 0, "alias of --master-port")
	fs.IntVar(&cfg.MaxRestarts, "max-restarts", 0, "restarts of the workers after a failure")
	fs.IntVar(&cfg.MaxRestarts, "max_restarts", 0, "alias of --max-restarts")
	fs.StringVar(&cfg.RunID, "run-id", "", "job id (TORCHELASTIC_RUN_ID; default random)")
	fs.StringVar(&cfg.Secret, "rdzv-secret", "", "rendezvous secret (default GP_RDZV_SECRET or random)")
	backend := fs.String("rdzv-backend", "static", "rendezvous backend: static (rank 0 hosts the store) or etcd")
	fs.StringVar(backend, "rdzv_backend", "static", "alias of --rdzv-backend")
	endpoint := fs.String("rdzv-endpoint", "", "etcd endpoints host:port[,host:port...] (etcd backend)")
	fs.StringVar(endpoint, "rdzv_endpoint", "", "alias of --rdzv-endpoint")
	host := fs.String("rdzv-host", "", "address other nodes reach this node at (etcd backend; default: the route to etcd)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "gprun: no program given; usage: gprun --nproc-per-node N -- PROGRAM ARGS...")
		return 2
	}
	switch *backend {
	case "static", "c10d":
	case "etcd", "etcd-v2":
		if *endpoint == "" || cfg.RunID == "" {
			fmt.Fprintln(stderr, "gprun: the etcd backend needs --rdzv-endpoint and a --run-id shared by the job's nodes")
			return 2
		}
		rd, err := etcdrdzv.New(ctx, etcdrdzv.Config{Endpoints: strings.Split(*endpoint, ","), RunID: cfg.RunID,
			NNodes: max(1, cfg.NNodes), Host: *host})
		if err != nil {
			fmt.Fprintf(stderr, "gprun: %v\n", err)
			return 1
		}
		defer rd.Close()
		cfg.Rendezvous = rd
	default:
		fmt.Fprintf(stderr, "gprun: rendezvous backend %q is not implemented (use static or etcd)\n", *backend)
		return 2
	}
	cfg.Program, cfg.Args = fs.Arg(0), fs.Args()[1:]
	cfg.Stdout, cfg.Stderr, cfg.Signals = stdout, stderr, sigs
	err := launch.Run(ctx, cfg)
	if err == nil {
		return 0
	}
	var we *launch.WorkerError
	if !errors.As(err, &we) {
		fmt.Fprintf(stderr, "gprun: %v\n", err)
		return 1
	}
	// The first failure of the last attempt, once: rank, status, its last stderr lines.
	fmt.Fprintf(stderr, "gprun: %s\n", we.Report())
	if we.ExitCode > 0 {
		return we.ExitCode
	}
	return 1
}
