// Command comm benchmarks the process group's collectives over loopback TCP against
// torch.distributed's gloo backend, as real processes at world 2 and 4. It prints a table and
// writes bench/results/comm.json. Bus bandwidth follows nccl-tests: algbw = bytes/time;
// all-reduce busbw = algbw*2(n-1)/n, reduce-scatter and all-gather busbw = algbw*(n-1)/n,
// broadcast busbw = algbw. bytes is the full buffer (the input of reduce-scatter, the output
// of all-gather).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/gorgonia-parallel/gp/parallel/launch"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
)

var ops = []string{"all-reduce", "reduce-scatter", "all-gather", "broadcast"}

// plan is the sizes (bytes) and iteration counts per timed run: about 128 MiB per run, at
// least 5 and at most 300 operations, which keeps the whole bench (gp over shared memory and
// TCP and gloo, worlds 2 and 4, -reps 5) within about five minutes on the 2-core machine.
func plan() [][2]int {
	var p [][2]int
	for b := 4 << 10; b <= 256<<20; b *= 4 {
		if b >= *minBytes && b <= *maxBytes {
			p = append(p, [2]int{b, max(5, min(300, (128<<20)/b))})
		}
	}
	return p
}

var (
	minBytes = flag.Int("min", 4<<10, "smallest size (bytes)")
	maxBytes = flag.Int("max", 256<<20, "largest size (bytes)")
	worlds   = flag.String("worlds", "2,4", "world sizes")
	noGloo   = flag.Bool("no-gloo", false, "skip torch.distributed gloo (tuning runs)")
	noTCP    = flag.Bool("no-tcp", false, "skip the same-run TCP comparison")
	opsFlag  = flag.String("ops", strings.Join(ops, ","), "collectives to run (comma-separated)")
	reps     = flag.Int("reps", 5, "timed runs per row (the median is reported), for gp and gloo alike")
	out      = flag.String("o", filepath.Join("bench", "results", "comm.json"), "JSON output")
)

type row struct {
	Op          string   `json:"op"`
	World       int      `json:"world"`
	Bytes       int      `json:"bytes"`
	Transport   string   `json:"transport"`
	BusBW       float64  `json:"busbw_gbps"`
	Latency     float64  `json:"latency_s"`
	CPU         float64  `json:"cpu_s,omitempty"`
	SharedBusBW *float64 `json:"shared_busbw_gbps,omitempty"` // all-reduce on comm.AllocFloat32 memory
	SharedRatio *float64 `json:"shared_ratio,omitempty"`      // SharedBusBW / gloo's
	TCPBusBW    *float64 `json:"tcp_busbw_gbps,omitempty"`
	TCPLatency  *float64 `json:"tcp_latency_s,omitempty"`
	GlooBusBW   *float64 `json:"gloo_busbw_gbps"`
	GlooLatency *float64 `json:"gloo_latency_s"`
	Ratio       *float64 `json:"ratio"`
	GlooNote    string   `json:"gloo_note,omitempty"`
	Load        float64  `json:"loadavg"`                // before gp's job: the machine is shared
	GlooLoad    float64  `json:"gloo_loadavg,omitempty"` // before gloo's job
}

// units says the unit of the row fields whose names do not.
var units = map[string]string{
	"bytes":      "bytes in each rank's buffer",
	"busbw_gbps": "GB/s (10^9 bytes per second) of bus bandwidth, as nccl-tests define it; so are shared_, tcp_ and gloo_busbw_gbps",
	"ratio":      "our bus bandwidth over gloo's (shared_ratio: ours on comm.AllocFloat32 memory over gloo's)",
	"loadavg":    "one-minute load average before our job (gloo_loadavg: before gloo's)",
}

type sample struct {
	Op        string  `json:"op"`
	World     int     `json:"world"`
	Bytes     int     `json:"bytes"`
	Transport string  `json:"transport,omitempty"`
	Latency   float64 `json:"latency_s"`
	CPU       float64 `json:"cpu_s,omitempty"`
	Shared    float64 `json:"shared_latency_s,omitempty"` // the same all-reduce on shared memory
	Error     string  `json:"error"`
}

func main() {
	flag.Parse()
	if os.Getenv("GP_BENCH_WORKER") != "" {
		if err := worker(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := parent(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/comm:", err)
		os.Exit(1)
	}
}

func parent() error {
	ctx := context.Background()
	prov := benchutil.Start("comm", os.Args[1:])
	var args []string
	for _, p := range plan() {
		args = append(args, fmt.Sprintf("%d:%d", p[0], p[1]))
	}
	for _, op := range strings.Split(*opsFlag, ",") {
		if !slices.Contains(ops, op) {
			return fmt.Errorf("-ops: unknown collective %q (want some of %s)", op, strings.Join(ops, ","))
		}
	}
	if *reps < 1 {
		return fmt.Errorf("-reps %d: want at least 1", *reps)
	}
	wargs := []string{"-min", strconv.Itoa(*minBytes), "-max", strconv.Itoa(*maxBytes), "-ops", *opsFlag, "-reps", strconv.Itoa(*reps)}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	script := filepath.Join("bench", "comm", "gloo_bench.py")
	haveTorch := !*noGloo && exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run() == nil
	var rows []row
	for _, ws := range strings.Split(*worlds, ",") {
		world, err := strconv.Atoi(ws)
		if err != nil {
			return fmt.Errorf("-worlds: %w", err)
		}
		// The default transport (shared memory here: every rank on one host), then TCP.
		fmt.Fprintf(os.Stderr, "world %d: gp...\n", world)
		gpLoad := benchutil.LoadAvg()
		gp, err := runJob(ctx, world, self, wargs, []string{"GP_BENCH_WORKER=1", "OPENBLAS_NUM_THREADS=1"})
		if err != nil {
			return fmt.Errorf("gp workers: %w", err)
		}
		tcp := map[string]sample{}
		if !*noTCP {
			fmt.Fprintf(os.Stderr, "world %d: gp over tcp...\n", world)
			ts, err := runJob(ctx, world, self, wargs, []string{"GP_BENCH_WORKER=1", "OPENBLAS_NUM_THREADS=1", "GP_COMM_TRANSPORT=tcp"})
			if err != nil {
				return fmt.Errorf("gp workers over tcp: %w", err)
			}
			for _, s := range ts {
				tcp[fmt.Sprint(s.Op, s.Bytes)] = s
			}
		}
		gloo := map[string]sample{}
		var glooLoad float64
		note := "python3-torch not installed (/usr/bin/python3 cannot import torch.distributed)"
		if haveTorch {
			fmt.Fprintf(os.Stderr, "world %d: gloo...\n", world)
			glooLoad = benchutil.LoadAvg()
			gs, err := runJob(ctx, world, "/usr/bin/python3", append([]string{script}, args...), []string{"OMP_NUM_THREADS=1", "GP_BENCH_OPS=" + *opsFlag, "GP_BENCH_REPS=" + strconv.Itoa(*reps)})
			if err != nil {
				note = "gloo run failed: " + err.Error()
			}
			for _, s := range gs {
				gloo[fmt.Sprint(s.Op, s.Bytes)] = s
			}
		}
		for _, s := range gp {
			r := row{Op: s.Op, World: world, Bytes: s.Bytes, Transport: s.Transport, Latency: s.Latency, CPU: s.CPU, Load: gpLoad, BusBW: busbw(s.Op, world, s.Bytes, s.Latency)}
			if s.Shared > 0 {
				bw := busbw(s.Op, world, s.Bytes, s.Shared)
				r.SharedBusBW = &bw
			}
			if ts, ok := tcp[fmt.Sprint(s.Op, s.Bytes)]; ok {
				bw := busbw(s.Op, world, s.Bytes, ts.Latency)
				r.TCPBusBW, r.TCPLatency = &bw, &ts.Latency
			}
			if g, ok := gloo[fmt.Sprint(s.Op, s.Bytes)]; ok && g.Error == "" {
				bw := busbw(s.Op, world, s.Bytes, g.Latency)
				ratio := r.BusBW / bw
				r.GlooBusBW, r.GlooLatency, r.Ratio, r.GlooLoad = &bw, &g.Latency, &ratio, glooLoad
				if r.SharedBusBW != nil {
					sr := *r.SharedBusBW / bw
					r.SharedRatio = &sr
				}
			} else if ok {
				r.GlooNote = "gloo: " + g.Error
			} else {
				r.GlooNote = note
			}
			rows = append(rows, r)
		}
	}
	printTable(rows)
	prov.End()
	return prov.Save(os.Stdout, *out, benchutil.Rows[row]{Provenance: prov, Units: units, Rows: rows})
}

func busbw(op string, n, bytes int, lat float64) float64 {
	algbw := float64(bytes) / lat / 1e9
	switch op {
	case "all-reduce":
		return algbw * 2 * float64(n-1) / float64(n)
	case "reduce-scatter", "all-gather":
		return algbw * float64(n-1) / float64(n)
	}
	return algbw
}

// runJob launches world ranks of program and returns rank 0's JSON lines.
func runJob(ctx context.Context, world int, program string, args, env []string) ([]sample, error) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	err := launch.Run(ctx, launch.Config{NProcPerNode: world, Program: program, Args: args, Env: env, Stdout: &out, Stderr: &errb})
	var res []sample
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "[rank0]: ")
		if !ok || !strings.HasPrefix(line, "{") {
			continue
		}
		var s sample
		if json.Unmarshal([]byte(line), &s) == nil {
			res = append(res, s)
		}
	}
	if err != nil {
		return res, fmt.Errorf("%w\n%s", err, tail(errb.String(), 2000))
	}
	return res, nil
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }

func printTable(rows []row) {
	fmt.Printf("%-15s %5s %10s %5s %12s %12s %8s %12s %12s %12s %12s %7s %7s\n", "op", "world", "bytes", "via", "busbw GB/s", "latency ms", "cpu ms", "shared GB/s", "tcp GB/s", "gloo GB/s", "gloo ms", "ratio", "shared")
	for _, r := range rows {
		g, gl, ra, tc, sh, sr := "n/a", "n/a", "n/a", "n/a", "", ""
		if r.GlooBusBW != nil {
			g, gl, ra = fmt.Sprintf("%.3f", *r.GlooBusBW), fmt.Sprintf("%.3f", *r.GlooLatency*1e3), fmt.Sprintf("%.2fx", *r.Ratio)
		}
		if r.TCPBusBW != nil {
			tc = fmt.Sprintf("%.3f", *r.TCPBusBW)
		}
		if r.SharedBusBW != nil {
			sh = fmt.Sprintf("%.3f", *r.SharedBusBW)
		}
		if r.SharedRatio != nil {
			sr = fmt.Sprintf("%.2fx", *r.SharedRatio)
		}
		fmt.Printf("%-15s %5d %10d %5s %12.3f %12.3f %8.3f %12s %12s %12s %12s %7s %7s\n", r.Op, r.World, r.Bytes, r.Transport, r.BusBW, r.Latency*1e3, r.CPU*1e3, sh, tc, g, gl, ra, sr)
	}
	fmt.Println("busbw: nccl-tests definition, GB/s = 1e9 bytes/s; cpu ms: CPU time (user+system) of all gp ranks together per operation (about 2x the latency when the ranks had both cores, about 1x when other load took one; the JSON has the load average before each job); via: gp's transport (shm: shared memory, chosen by default on one host); " +
		"shared: the same all-reduce on buffers from comm.AllocFloat32 (shared memory, reduced in place: how DDP reduces gradients with ddp.SharedGradients), and its ratio to gloo; tcp: gp forced to loopback TCP (GP_COMM_TRANSPORT=tcp) in the same run; ratio = gp busbw / gloo busbw (torch.distributed gloo, Debian python3-torch); n/a: see gloo_note in the JSON")
}

func worker() error {
	ctx := context.Background()
	// One rank of several on this host: the runtime's monitor thread yields the cores to the
	// compute (parallel/sysmon), as in every program the launcher starts.
	if _, err := sysmon.Lower(); err != nil {
		return err
	}
	g, err := comm.InitFromEnv(ctx, benchOptions()...)
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	n, r := g.Size(), g.Rank()
	transport := comm.TransportOf(g)
	// One shared buffer of the largest size for the all-reduce rows' shared column (only
	// where the transport shares memory: elsewhere it would time ordinary memory again).
	var sharedBuf comm.F32
	if transport == "shm" && slices.Contains(strings.Split(*opsFlag, ","), "all-reduce") {
		b, err := comm.AllocFloat32(ctx, g, *maxBytes/4)
		if err != nil {
			return err
		}
		sharedBuf = b
	}
	for _, op := range strings.Split(*opsFlag, ",") {
		for _, p := range plan() {
			nbytes, iters := p[0], p[1]
			count := nbytes / 4
			count -= count % n
			shard := count / n
			var fn func() comm.Work
			switch op {
			case "all-reduce":
				b := make(comm.F32, count)
				fn = func() comm.Work { return g.AllReduce(b, comm.Sum) }
			case "reduce-scatter":
				src, dst := make(comm.F32, count), make(comm.F32, shard)
				fn = func() comm.Work { return g.ReduceScatter(dst, src, comm.Sum) }
			case "all-gather":
				src, dst := make(comm.F32, shard), make(comm.F32, count)
				fn = func() comm.Work { return g.AllGather(dst, src) }
			default:
				b := make(comm.F32, count)
				fn = func() comm.Work { return g.Broadcast(b, 0) }
			}
			lat, cpu, err := timeOp(ctx, g, fn, iters)
			if err != nil {
				return err
			}
			var shared float64
			if op == "all-reduce" && sharedBuf != nil {
				b := sharedBuf[:count]
				if shared, _, err = timeOp(ctx, g, func() comm.Work { return g.AllReduce(b, comm.Sum) }, iters); err != nil {
					return err
				}
			}
			if r == 0 {
				b, _ := json.Marshal(sample{Op: op, World: n, Bytes: nbytes, Latency: lat, CPU: cpu, Shared: shared, Transport: transport})
				fmt.Println(string(b))
			}
		}
	}

	return nil
}

// timeOp runs fn once untimed, then reps timed runs of iters operations each; it returns
// the median run's time per operation (the slowest rank's) and the CPU time of all ranks
// together per operation. The median keeps a burst of load on this shared machine to one
// run instead of the row.
func timeOp(ctx context.Context, g comm.Group, fn func() comm.Work, iters int) (float64, float64, error) {
	if err := fn().Wait(ctx); err != nil {
		return 0, 0, err
	}
	lats := make([]float64, *reps)
	cpu := comm.F64{0}
	for i := range lats {
		if err := g.Barrier().Wait(ctx); err != nil {
			return 0, 0, err
		}
		start, cpu0 := time.Now(), benchutil.CPUSeconds()
		for range iters {
			if err := fn().Wait(ctx); err != nil {
				return 0, 0, err
			}
		}
		lat := comm.F64{time.Since(start).Seconds() / float64(iters)}
		cpu[0] += (benchutil.CPUSeconds() - cpu0) / float64(iters*len(lats))
		if err := g.AllReduce(lat, comm.Max).Wait(ctx); err != nil {
			return 0, 0, err
		}
		lats[i] = lat[0]
	}
	if err := g.AllReduce(cpu, comm.Sum).Wait(ctx); err != nil {
		return 0, 0, err
	}
	return benchutil.Median(lats), cpu[0], nil
}

// benchOptions are the group options; GP_BENCH_STREAMS and GP_BENCH_CHUNK override the
// defaults for tuning experiments.
func benchOptions() []comm.Option {
	opts := []comm.Option{comm.WithTimeout(5 * time.Minute)}
	if v, err := strconv.Atoi(os.Getenv("GP_BENCH_STREAMS")); err == nil {
		opts = append(opts, comm.WithStreams(v))
	}
	if v, err := strconv.Atoi(os.Getenv("GP_BENCH_CHUNK")); err == nil {
		opts = append(opts, comm.WithChunkBytes(v))
	}
	return opts
}
