// Command mpi benchmarks the all-reduce and a send/recv ping-pong of the MPI backend (parallel/comm/mpi, OpenMPI's
// MPI_Iallreduce) against comm's own shared-memory and TCP transports, at world 2 on this
// host, from 1 to 256 MiB. Every backend runs under the same `mpirun -np 2` (comm's
// transports chosen with GP_COMM_BACKEND=shm|tcp, their ranks read from OMPI_COMM_WORLD_*).
// It prints a table and writes bench/results/mpi.json. busbw follows nccl-tests: algbw =
// bytes/time, all-reduce busbw = algbw*2(n-1)/n; time is the slowest rank's, the median of
// -reps timed runs.
//
//	go run ./bench/mpi [-reps 5] [-max 268435456]
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
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/mpi"
)

var (
	reps     = flag.Int("reps", 5, "timed runs per row (the median is reported)")
	minBytes = flag.Int("min", 1<<20, "smallest size (bytes)")
	maxBytes = flag.Int("max", 256<<20, "largest size (bytes)")
	np       = flag.Int("np", 2, "ranks (mpirun -np)")
	backends = flag.String("backends", "mpi,mpi-native,shm,tcp", "GP_COMM_BACKEND values to compare (mpi-native: mpi with GP_MPI_RING_BYTES=0)")
	out      = flag.String("o", filepath.Join("bench", "results", "mpi.json"), "JSON output")
	isWorker = flag.Bool("worker", false, "run as one rank (set by the bench itself)")
)

type sample struct {
	Op      string  `json:"op"` // all-reduce, or send-recv (a ping-pong between ranks 0 and 1)
	Backend string  `json:"backend"`
	World   int     `json:"world"`
	Bytes   int     `json:"bytes"`
	Latency float64 `json:"latency_s"`
	BusBW   float64 `json:"busbw_gbps"` // send-recv: bytes one way / (round trip / 2)
	CPU     float64 `json:"cpu_s"`      // CPU time of all ranks together per operation
	Load    float64 `json:"loadavg,omitempty"`
}

func main() {
	flag.Parse()
	if *isWorker {
		if err := worker(); err != nil {
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
	self, err := os.Executable()
	if err != nil {
		return err
	}
	mpirunVersion, err := exec.Command("mpirun", "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("mpirun --version: %w (apt-get install openmpi-bin)", err)
	}
	var rows []sample
	for _, b := range strings.Split(*backends, ",") {
		load := benchutil.LoadAvg()
		got, err := launch(self, b)
		if err != nil {
			return fmt.Errorf("backend %s: %w", b, err)
		}
		for i := range got {
			got[i].Load, got[i].Backend = load, b
		}
		rows = append(rows, got...)
	}
	names := strings.Split(*backends, ",")
	for _, op := range []string{"all-reduce", "send-recv"} {
		what := "all-reduce, float32 sum, busbw"
		if op == "send-recv" {
			what = "send-recv ping-pong between ranks 0 and 1, bytes one way / half the round trip"
		}
		fmt.Printf("%s; world %d, %s; median of %d runs\n", what, *np, benchutil.FirstLine(string(mpirunVersion)), *reps)
		fmt.Printf("%10s", "MiB")
		for _, n := range names {
			fmt.Printf(" %12s %10s", n+" GB/s", "cpu ms")
		}
		for _, n := range names[1:] {
			fmt.Printf(" %12s", names[0]+"/"+n)
		}
		fmt.Println()
		for _, sz := range sizes() {
			fmt.Printf("%10d", sz>>20)
			bw := map[string]float64{}
			for _, n := range names {
				for _, r := range rows {
					if r.Op == op && r.Backend == n && r.Bytes == sz {
						bw[n] = r.BusBW
						fmt.Printf(" %12.3f %10.1f", r.BusBW, r.CPU*1e3)
					}
				}
			}
			for _, n := range names[1:] {
				fmt.Printf(" %11.2fx", bw[names[0]]/bw[n])
			}
			fmt.Println()
		}
	}
	fmt.Printf("loadavg before each backend's job: ")
	for _, n := range names {
		for _, r := range rows {
			if r.Backend == n {
				fmt.Printf("%s %.1f  ", n, r.Load)
				break
			}
		}
	}
	fmt.Println()
	fmt.Println("busbw: nccl-tests definition (GB/s = 1e9 bytes/s, 2(n-1)/n x bytes / time); cpu ms: CPU time (user+system) of all ranks together per operation; " +
		"mpi: parallel/comm/mpi (all-reduce: MPI_Iallreduce in place below 4 MiB, the package's ring over MPI_Isend/MPI_Irecv from 4 MiB; mpi-native: MPI_Iallreduce at every size; OpenMPI's defaults: vader shared memory with CMA single copy between the ranks); " +
		"shm, tcp: comm's transports (GP_COMM_BACKEND), all under the same mpirun")
	buf, err := json.MarshalIndent(map[string]any{"mpirun": benchutil.FirstLine(string(mpirunVersion)), "reps": *reps, "rows": rows}, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(buf, '\n'), 0o644)
}

// launch runs the ranks under mpirun with GP_COMM_BACKEND=backend and returns rank 0's rows.
func launch(self, backend string) ([]sample, error) {
	args := []string{"--oversubscribe", "--bind-to", "none", "-np", strconv.Itoa(*np)}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	ring := "4194304"
	if backend == "mpi-native" {
		backend, ring = "mpi", "0"
	}
	env := []string{"GP_COMM_BACKEND=" + backend, mpi.RingBytesEnv + "=" + ring, "OPENBLAS_NUM_THREADS=1", "OMPI_MCA_btl_tcp_if_include=lo", "OMPI_MCA_oob_tcp_if_include=lo",
		"GP_RDZV_SECRET=bench-mpi"}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		args = append(args, "-x", k)
	}
	args = append(args, self, "-worker", "-reps", strconv.Itoa(*reps), "-min", strconv.Itoa(*minBytes), "-max", strconv.Itoa(*maxBytes))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.Env = append(os.Environ(), env...)
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

func worker() error {
	ctx := context.Background()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(5*time.Minute))
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	n := g.Size()
	backend := comm.TransportOf(g)
	if want := os.Getenv(comm.BackendEnv); backend != want {
		return fmt.Errorf("asked for backend %s, got %s", want, backend)
	}
	for _, op := range []string{"all-reduce", "send-recv"} {
		for _, sz := range sizes() {
			buf := make(comm.F32, sz/4)
			fn := func() error { return g.AllReduce(buf, comm.Sum).Wait(ctx) }
			if op == "send-recv" {
				fn = func() error { return pingPong(ctx, g, buf) }
			}
			lat, cpu, err := timeOp(ctx, g, fn, max(3, min(32, (64<<20)/sz)))
			if err != nil {
				return fmt.Errorf("%s of %d bytes: %w", op, sz, err)
			}
			bw := float64(sz) / lat * 2 * float64(n-1) / float64(n) / 1e9
			if op == "send-recv" {
				bw = float64(sz) / (lat / 2) / 1e9
			}
			if g.Rank() == 0 {
				b, _ := json.Marshal(sample{Op: op, Backend: backend, World: n, Bytes: sz, Latency: lat, BusBW: bw, CPU: cpu})
				fmt.Println(string(b))
			}
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
