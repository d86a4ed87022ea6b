// Command mpi benchmarks the collectives of the MPI backend (parallel/comm/mpi) against
// comm's own shared-memory and TCP transports on this host: all-reduce, reduce-scatter,
// all-gather and broadcast (and, with -ops, a send/recv ping-pong), at world 2 and 3, from
// 1 KiB to 64 MiB. Every backend runs under the same `mpirun -np N` (comm's transports
// chosen with GP_COMM_BACKEND=shm|tcp, their ranks read from OMPI_COMM_WORLD_*). The MPI
// backend runs three ways: mpi (the package's defaults: OpenMPI's collective below a
// threshold per collective, the package's ring or chain over MPI messages from it),
// mpi-native (GP_MPI_RING_BYTES=0: OpenMPI's collectives at every size, the "before") and
// mpi-ring (GP_MPI_RING_BYTES=1: the package's algorithms at every size). One mpirun job
// runs one (world, op, backend), the backends of one (world, op) one after the other, so
// that the load of the shared machine changes little between the numbers compared; the
// 1-minute load average is recorded before each job.
//
// busbw follows nccl-tests: algbw = S/time, S the whole buffer (all-gather's dst,
// reduce-scatter's src); busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for
// reduce-scatter and all-gather, 1 for broadcast. time is the slowest rank's, the median
// of -reps timed runs. It prints one table (busbw and the ratios mpi/shm and
// mpi/mpi-native) and writes bench/results/mpi.json.
//
//	go run ./bench/mpi [-reps 5] [-worlds 2,3] [-min 1024] [-max 67108864]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/mpi"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
)

var (
	reps     = flag.Int("reps", 5, "timed runs per job and size (the median is the job's number)")
	rounds   = flag.Int("rounds", 3, "times every (world, op) cycles through the backends (the median over rounds is reported)")
	minBytes = flag.Int("min", 1<<10, "smallest size (bytes)")
	maxBytes = flag.Int("max", 64<<20, "largest size (bytes)")
	worlds   = flag.String("worlds", "2,3", "world sizes (mpirun -np)")
	ops      = flag.String("ops", "all-reduce,reduce-scatter,all-gather,broadcast", "collectives to run (and send-recv: a ping-pong between ranks 0 and 1)")
	backends = flag.String("backends", "mpi,mpi-native,mpi-ring,shm,tcp", "GP_COMM_BACKEND values to compare (mpi-native: mpi with GP_MPI_RING_BYTES=0; mpi-ring: with GP_MPI_RING_BYTES=1)")
	out      = flag.String("o", filepath.Join("bench", "results", "mpi.json"), "JSON output")
	isWorker = flag.Bool("worker", false, "run as one rank (set by the bench itself)")
	workerOp = flag.String("op", "", "the collective a worker runs (set by the bench itself)")
)

type sample struct {
	Op      string  `json:"op"`
	Backend string  `json:"backend"`
	World   int     `json:"world"`
	Bytes   int     `json:"bytes"` // the whole buffer (S of nccl-tests)
	Latency float64 `json:"latency_s"`
	BusBW   float64 `json:"busbw_gbps"` // send-recv: bytes one way / (round trip / 2)
	CPU     float64 `json:"cpu_s"`      // CPU time of all ranks together per operation
	Load    float64 `json:"loadavg"`    // 1-minute load average before the job
	// Rounds are the busbw of each round (-rounds); BusBW, Latency and CPU are the median
	// round's, Load the mean of the rounds'.
	Rounds []float64 `json:"busbw_rounds,omitempty"`
}

func main() {
	flag.Parse()
	if *isWorker {
		if err := worker(*workerOp); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/mpi:", err)
		os.Exit(1)
	}
}

// sizes are the buffer sizes in bytes: powers of 4 from -min to -max.
func sizes() []int {
	var s []int
	for b := *minBytes; b <= *maxBytes; b *= 4 {
		s = append(s, b)
	}
	return s
}

func run() error {
	prov := benchutil.Start("mpi", os.Args[1:])
	self, err := os.Executable()
	if err != nil {
		return err
	}
	mpirunVersion, err := exec.Command("mpirun", "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("mpirun --version: %w (apt-get install openmpi-bin)", err)
	}
	var ns []int
	for _, w := range strings.Split(*worlds, ",") {
		n, err := strconv.Atoi(w)
		if err != nil || n < 2 {
			return fmt.Errorf("-worlds: %q is not a world size of 2 or more", w)
		}
		ns = append(ns, n)
	}
	names, opNames := strings.Split(*backends, ","), strings.Split(*ops, ",")
	var rows []sample
	for _, n := range ns {
		for _, op := range opNames {
			runs := map[string][][]sample{} // backend -> round -> sizes
			for round := range *rounds {
				for _, b := range names {
					load := benchutil.LoadAvg()
					got, err := launch(self, b, op, n)
					if err != nil {
						return fmt.Errorf("world %d, %s, backend %s, round %d: %w", n, op, b, round, err)
					}
					for i := range got {
						got[i].Load, got[i].Backend = load, b
					}
					runs[b] = append(runs[b], got)
				}
			}
			for _, b := range names {
				rows = append(rows, medianRounds(runs[b])...)
			}
		}
	}
	printTable(rows, ns, opNames, names, benchutil.FirstLine(string(mpirunVersion)))
	doc := map[string]any{"mpirun": benchutil.FirstLine(string(mpirunVersion)), "reps": *reps, "rounds": *rounds,
		"thresholds": thresholds(), "rows": rows, "units": map[string]string{
			"bytes":      "bytes of the whole buffer (S of nccl-tests)",
			"busbw_gbps": "GB/s (10^9 bytes per second) of bus bandwidth as nccl-tests define it (send-recv: bytes one way over half the round trip); so are busbw_rounds",
			"cpu_s":      "CPU seconds of all ranks together per operation",
			"loadavg":    "one-minute load average before the job, the mean over the rounds",
			"thresholds": "bytes from which the mpi backend runs its own ring instead of MPI's collective (0: never)",
		}}
	prov.End()
	prov.Set(doc)
	return prov.Save(os.Stdout, *out, doc)
}

// medianRounds merges the rounds of one backend: per size, the round of median busbw.
func medianRounds(rounds [][]sample) []sample {
	var merged []sample
	for i := range rounds[0] {
		var all []sample
		for _, r := range rounds {
			if i < len(r) {
				all = append(all, r[i])
			}
		}
		slices.SortFunc(all, func(a, b sample) int { return cmpFloat(a.BusBW, b.BusBW) })
		m := all[len(all)/2]
		m.Rounds, m.Load = nil, 0
		for _, s := range all {
			m.Rounds = append(m.Rounds, s.BusBW)
			m.Load += s.Load / float64(len(all))
		}
		merged = append(merged, m)
	}
	return merged
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// thresholds are the package's default sizes from which each collective leaves OpenMPI's.
func thresholds() map[string]int {
	t := map[string]int{}
	for _, k := range []string{"all-reduce", "reduce-scatter", "all-gather", "broadcast"} {
		t[k], _ = mpi.DefaultRingBytes(k)
	}
	return t
}

func printTable(rows []sample, ns []int, opNames, names []string, version string) {
	find := func(op, b string, n, sz int) (sample, bool) {
		for _, r := range rows {
			if r.Op == op && r.Backend == b && r.World == n && r.Bytes == sz {
				return r, true
			}
		}
		return sample{}, false
	}
	fmt.Printf("busbw GB/s (nccl-tests), float32 (sum where reduced), median over %d rounds of the median of %d runs, %s; load = 1-min load average before the first backend's jobs (mean over rounds)\n", *rounds, *reps, version)
	fmt.Printf("%-14s %5s %9s", "op", "world", "KiB")
	for _, b := range names {
		fmt.Printf(" %10s", b)
	}
	var ratios [][2]string
	for _, pair := range [][2]string{{"mpi", "shm"}, {"mpi", "mpi-native"}} {
		if slices.Contains(names, pair[0]) && slices.Contains(names, pair[1]) {
			ratios = append(ratios, pair)
			fmt.Printf(" %14s", pair[0]+"/"+pair[1])
		}
	}
	fmt.Printf(" %5s\n", "load")
	for _, op := range opNames {
		for _, n := range ns {
			for _, sz := range sizes() {
				fmt.Printf("%-14s %5d %9d", op, n, sz>>10)
				bw := map[string]float64{}
				for _, b := range names {
					if r, ok := find(op, b, n, sz); ok {
						bw[b] = r.BusBW
						fmt.Printf(" %10.3f", r.BusBW)
					} else {
						fmt.Printf(" %10s", "-")
					}
				}
				for _, p := range ratios {
					fmt.Printf(" %13.2fx", bw[p[0]]/bw[p[1]])
				}
				r, _ := find(op, names[0], n, sz)
				fmt.Printf(" %5.1f\n", r.Load)
			}
		}
	}
	t := thresholds()
	fmt.Printf("mpi: parallel/comm/mpi with its defaults (OpenMPI's MPI_Iallreduce, MPI_Ireduce_scatter, MPI_Iallgather(v), MPI_Ibcast below a threshold; "+
		"from it the package's ring (all-reduce, reduce-scatter, all-gather) or pipelined chain (broadcast) over MPI_Isend/MPI_Irecv; thresholds: all-reduce %d KiB, reduce-scatter %d KiB, all-gather %d KiB, broadcast %d KiB); "+
		"mpi-native: OpenMPI's collectives at every size; mpi-ring: the package's algorithms at every size; OpenMPI's defaults otherwise (vader shared memory, CMA single copy); "+
		"shm, tcp: comm's transports (GP_COMM_BACKEND), all under the same mpirun; "+
		"busbw = S/time x 2(n-1)/n (all-reduce), (n-1)/n (reduce-scatter, all-gather), 1 (broadcast), S the whole buffer\n",
		t["all-reduce"]>>10, t["reduce-scatter"]>>10, t["all-gather"]>>10, t["broadcast"]>>10)
}

// launch runs n ranks of op under mpirun with the backend's environment and returns rank
// 0's rows.
func launch(self, backend, op string, n int) ([]sample, error) {
	args := []string{"--oversubscribe", "--bind-to", "none", "-np", strconv.Itoa(n)}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	env := []string{"OPENBLAS_NUM_THREADS=1", "OMPI_MCA_btl_tcp_if_include=lo", "OMPI_MCA_oob_tcp_if_include=lo", "GP_RDZV_SECRET=bench-mpi"}
	switch backend {
	case "mpi-native":
		env = append(env, "GP_COMM_BACKEND=mpi", mpi.RingBytesEnv+"=0")
	case "mpi-ring":
		env = append(env, "GP_COMM_BACKEND=mpi", mpi.RingBytesEnv+"=1")
	default:
		env = append(env, "GP_COMM_BACKEND="+backend)
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		args = append(args, "-x", k)
	}
	args = append(args, self, "-worker", "-op", op, "-reps", strconv.Itoa(*reps), "-min", strconv.Itoa(*minBytes), "-max", strconv.Itoa(*maxBytes))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("mpirun: %w\n%s%s", err, stdout.String(), stderr.String())
	}
	var rows []sample
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var s sample
		if json.Unmarshal(sc.Bytes(), &s) == nil && s.Bytes > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no results from the ranks:\n%s%s", stdout.String(), stderr.String())
	}
	return rows, nil
}

// busFactor is nccl-tests' busbw/algbw for op at world n.
func busFactor(op string, n int) float64 {
	switch op {
	case "all-reduce":
		return 2 * float64(n-1) / float64(n)
	case "reduce-scatter", "all-gather":
		return float64(n-1) / float64(n)
	}
	return 1
}

func worker(op string) error {
	ctx := context.Background()
	// One rank of several on this host: the runtime's monitor thread yields the cores to the
	// compute (parallel/sysmon), as in every program the launcher starts.
	if _, err := sysmon.Lower(); err != nil {
		return err
	}
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(5*time.Minute))
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	n, r := g.Size(), g.Rank()
	backend := comm.TransportOf(g)
	if want := os.Getenv(comm.BackendEnv); backend != want {
		return fmt.Errorf("asked for backend %s, got %s", want, backend)
	}
	for _, sz := range sizes() {
		total := sz / 4
		lo, hi := comm.ShardRange(total, n, r)
		buf, shard := make(comm.F32, total), make(comm.F32, hi-lo)
		var fn func() error
		switch op {
		case "all-reduce":
			fn = func() error { return g.AllReduce(buf, comm.Sum).Wait(ctx) }
		case "reduce-scatter":
			fn = func() error { return g.ReduceScatter(shard, buf, comm.Sum).Wait(ctx) }
		case "all-gather":
			fn = func() error { return g.AllGather(buf, shard).Wait(ctx) }
		case "broadcast":
			fn = func() error { return g.Broadcast(buf, 0).Wait(ctx) }
		case "send-recv":
			fn = func() error { return pingPong(ctx, g, buf) }
		default:
			return fmt.Errorf("unknown op %q", op)
		}
		lat, cpu, err := timeOp(ctx, g, fn, max(3, min(32, (64<<20)/sz)))
		if err != nil {
			return fmt.Errorf("%s of %d bytes: %w", op, sz, err)
		}
		bw := float64(sz) / lat * busFactor(op, n) / 1e9
		if op == "send-recv" {
			bw = float64(sz) / (lat / 2) / 1e9
		}
		if r == 0 {
			b, _ := json.Marshal(sample{Op: op, Backend: backend, World: n, Bytes: sz, Latency: lat, BusBW: bw, CPU: cpu})
			fmt.Println(string(b))
		}
	}
	return nil
}

// pingPong sends buf from rank 0 to rank 1 and back; the other ranks do nothing.
func pingPong(ctx context.Context, g comm.Group, buf comm.F32) error {
	switch g.Rank() {
	case 0:
		return errors.Join(g.Send(buf, 1, 0).Wait(ctx), g.Recv(buf, 1, 0).Wait(ctx))
	case 1:
		return errors.Join(g.Recv(buf, 0, 0).Wait(ctx), g.Send(buf, 0, 0).Wait(ctx))
	}
	return nil
}

// timeOp runs fn once untimed, then -reps timed runs of iters calls each, every run
// starting from a barrier; it returns the median run's time per call (the slowest rank's)
// and the CPU time of all ranks together per call, averaged over the runs.
func timeOp(ctx context.Context, g comm.Group, fn func() error, iters int) (lat, cpu float64, err error) {
	if err := fn(); err != nil {
		return 0, 0, err
	}
	lats := make([]float64, *reps)
	for i := range lats {
		if err := g.Barrier().Wait(ctx); err != nil {
			return 0, 0, err
		}
		c0, t0 := benchutil.CPUSeconds(), time.Now()
		for range iters {
			if err := fn(); err != nil {
				return 0, 0, err
			}
		}
		slow := comm.F64{time.Since(t0).Seconds() / float64(iters)}
		used := comm.F64{(benchutil.CPUSeconds() - c0) / float64(iters)}
		if err := errors.Join(g.AllReduce(slow, comm.Max).Wait(ctx), g.AllReduce(used, comm.Sum).Wait(ctx)); err != nil {
			return 0, 0, err
		}
		lats[i] = slow[0]
		cpu += used[0] / float64(*reps)
	}
	return benchutil.Median(lats), cpu, nil
}
