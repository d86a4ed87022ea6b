// Command gprun launches the worker processes of a distributed job with the torchrun
// environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...), prefixes their output with
// their rank, forwards SIGINT/SIGTERM, and restarts them after a failure. Its flags are
// torchrun's, with torchrun's meaning:
//
//	gprun --standalone --nproc-per-node N|gpu|cpu|auto -- PROGRAM ARGS...
//	gprun --nnodes M --node-rank R --master-addr A --master-port P --nproc-per-node N -- ...
//	gprun --nnodes MIN:MAX --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id ID -- ...
//	gprun --nnodes M --rdzv-backend etcd --rdzv-endpoint HOST:PORT --rdzv-id ID -- ...
//
// and --max-restarts K, --log-dir DIR with --redirects/-r and --tee/-t (0 none, 1 stdout,
// 2 stderr, 3 both, or per local rank "0:3,1:2"; files DIR/ID/attempt_N/LOCAL_RANK/
// stdout.log and stderr.log), --monitor-interval SECONDS, --local-addr ADDR, --rdzv-conf
// key=value,... (c10d: join_timeout, last_call_timeout, keep_alive_interval,
// keep_alive_max_attempt, is_host; seconds). --run-id is --rdzv-id, --rdzv-host is
// --local-addr, and every flag also has its underscore spelling (--nproc_per_node).
//
// A flag not on the command line is read from PET_<FLAG> (PET_NNODES, PET_NPROC_PER_NODE,
// PET_NODE_RANK, PET_MASTER_ADDR, PET_RDZV_ENDPOINT, ...: what Kubeflow's PyTorchJob sets
// and torchrun reads), and --master-addr and --master-port also from MASTER_ADDR and
// MASTER_PORT. Started by srun as one task per node (srun --ntasks-per-node=1 gprun ...),
// gprun takes --nnodes, --node-rank and the master (the first host of the node list) from
// SLURM; a flag that disagrees with SLURM is an error naming both.
//
// --nproc-per-node gpu counts CUDA_VISIBLE_DEVICES, else the /dev/nvidiaN device files;
// cpu is the CPUs gprun may run on; auto is gpu when there is a GPU and otherwise cpu (as
// torchrun), each worker then running its BLAS on one thread.
//
// When a worker exits non-zero, gprun stops the others (SIGTERM, then SIGKILL
// --term-timeout SECONDS later, 5 by default; 0 kills at once), prints the failure once
// (rank, exit status and the last lines of its stderr) and restarts them all while
// --max-restarts allows; it exits with the failed worker's exit code. Restarts are spaced
// by --restart-backoff SECONDS (default 1), doubling after each attempt that failed within
// a minute up to 30 s and starting again after a longer one, so that a fault lasting a few
// seconds (a full disk being freed) does not use up the restarts; 0 restarts at once, as
// torchrun does (which has no backoff: only its --monitor-interval spaces restarts). The
// workers die with gprun, even a SIGKILLed one: on Linux through the parent-death signal,
// elsewhere through a pipe the workers inherit (comm.InitFromEnv watches it; see
// launchenv.PipeEnv).
//
// On a single node the master port is picked free and the rendezvous secret
// (GP_RDZV_SECRET) generated; with the static backend several nodes need --master-port and a
// shared secret (GP_RDZV_SECRET in the launcher's environment, or --rdzv-secret). With c10d
// the node whose address is the endpoint hosts the rendezvous store there (multi-node
// without etcd; see parallel/launch/c10drdzv): --nnodes MIN:MAX is elastic, the job going on
// with fewer nodes after one is lost and taking in a node that joins, between restarts of
// the workers (which, as in torchrun, do not count against --max-restarts). Its store is
// protected by GP_RDZV_SECRET or --rdzv-secret when every node has it, else only by the run
// id, as torchrun's is not at all. With the etcd backend the nodes find each other through
// etcd under the run id (see parallel/launch/etcdrdzv). With either, node ranks, the master
// and the secret come from the rendezvous, and when any node's workers fail every node
// restarts its workers in a new round.
//
// The workers' output reaches gprun's line by line, each line prefixed once, so a progress
// bar redrawn with carriage returns would show only its last state. When gprun's standard
// output is a terminal, it names that terminal to the workers in GP_PROGRESS_TTY
// ("/dev/pts/3"), where one of them (the trainer's rank 0) draws its bar; otherwise the
// variable is unset and the workers print lines.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gorgonia-parallel/gp/parallel/launch"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, sigs))
}

// run is gprun with its arguments, output and signals explicit; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	cfg, rdzv, code := configure(ctx, args, stderr)
	if code >= 0 {
		return code
	}
	if rdzv != nil {
		defer rdzv.Close()
	}
	cfg.Stdout, cfg.Stderr, cfg.Signals = stdout, stderr, sigs
	cfg.Env = append(cfg.Env, progressEnv(stdout)...)
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
