// Command netbed benchmarks the process group across hosts of the multi-host test bed
// (internal/netbed: network namespaces on a bridge, links shaped by tc): for each number of
// hosts and link rate it runs the same job twice, flat (GP_COMM_HIERARCHY=0: TCP between
// every pair of ranks, the ring over all ranks) and hierarchical (GP_COMM_HIERARCHY=1: shared
// memory inside a host, TCP among one leader per host), and prints a table and a JSON file.
// With -python (default Debian's /usr/bin/python3 with torch) it also runs torch.distributed's
// gloo backend on the same namespaces and ranks (bench/comm/gloo_bench.py, GLOO_SOCKET_IFNAME
// eth0): gloo is flat, a ring over all ranks. gloo on CPU in torch 1.13 has no reduce_scatter,
// so that column reads n/a. Needs root and iproute2.
//
// Units: algbw = bytes/time (bytes: the full buffer, as in bench/comm); busbw follows
// nccl-tests over the whole world n (all-reduce algbw*2(n-1)/n, reduce-scatter and
// all-gather algbw*(n-1)/n); link is the fraction of the shaped link rate that each host's
// uplink would carry with an ideal host-level algorithm at that algbw (all-reduce
// algbw*2(H-1)/H, the others algbw*(H-1)/H, over H hosts): 1.0 is the link's speed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/netbed"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
)

var (
	hostsFlag = flag.String("hosts", "2,3", "numbers of hosts")
	local     = flag.Int("local", 2, "ranks per host")
	rates     = flag.String("rates", "1gbit,10gbit", "link rates (tc syntax)")
	delay     = flag.Duration("delay", 500*time.Microsecond, "one-way delay per link (netem, or a userspace NFQUEUE hold where the kernel has no netem; see internal/netbed)")
	opsFlag   = flag.String("ops", "all-reduce,reduce-scatter,all-gather", "collectives")
	sizes     = flag.String("sizes", "1048576,4194304,16777216,67108864", "buffer sizes (bytes)")
	reps      = flag.Int("reps", 3, "timed runs per row (median reported)")
	out       = flag.String("o", filepath.Join("bench", "results", "netbed.json"), "JSON output")
	python    = flag.String("python", "/usr/bin/python3", "Python with torch for the gloo side (\"\": skip gloo)")
	glooPy    = flag.String("gloo-script", filepath.Join("bench", "comm", "gloo_bench.py"), "gloo benchmark script")
)

const workerEnv = "GP_NETBED_BENCH_WORKER"

type row struct {
	Op       string  `json:"op"`
	Hosts    int     `json:"hosts"`
	Local    int     `json:"ranks_per_host"`
	Rate     string  `json:"rate"`
	Shaping  string  `json:"shaping"`
	Bytes    int     `json:"bytes"`
	FlatLat  float64 `json:"flat_latency_s"`
	HierLat  float64 `json:"hier_latency_s"`
	FlatBus  float64 `json:"flat_busbw_gbps"`
	HierBus  float64 `json:"hier_busbw_gbps"`
	FlatLink float64 `json:"flat_link_fraction"`
	HierLink float64 `json:"hier_link_fraction"`
	// GlooLat is 0 and GlooErr says why when gloo did not run the op.
	GlooLat  float64 `json:"gloo_latency_s,omitempty"`
	GlooBus  float64 `json:"gloo_busbw_gbps,omitempty"`
	GlooLink float64 `json:"gloo_link_fraction,omitempty"`
	GlooErr  string  `json:"gloo_error,omitempty"`
	Load     float64 `json:"loadavg"`
}

// sample is one worker measurement (rank 0 prints it as a JSON line).
type sample struct {
	Op        string  `json:"op"`
	Bytes     int     `json:"bytes"`
	Latency   float64 `json:"latency_s"`
	Transport string  `json:"transport"`
	Error     string  `json:"error"` // gloo: the op is missing
}

func main() {
	flag.Parse()
	var err error
	switch {
	case os.Getenv(workerEnv) != "":
		err = worker()
	case os.Getenv(rawWorkerEnv) != "":
		err = rawWorker()
	case *raw:
		err = rawParent()
	default:
		err = parent()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netbed:", err)
		os.Exit(1)
	}
}

// units says the unit of the row fields (of both modes) whose names do not.
var units = map[string]string{
	"rate":          "link rate of each host, tc syntax (bits per second)",
	"bytes":         "bytes of each rank's buffer (-raw: bytes each host sends per timed run)",
	"busbw_gbps":    "GB/s (10^9 bytes per second) of bus bandwidth as nccl-tests define it: flat_, hier_ and gloo_busbw_gbps",
	"link_fraction": "fraction of the link rate the host-level bus bandwidth reaches: flat_, hier_ and gloo_link_fraction (-raw: link_fraction)",
	"gbps":          "-raw: GB/s (10^9 bytes per second) each host sends, and as much it receives",
	"io_bytes":      "-raw: bytes per write and read call",
	"busy_cores":    "-raw: machine-wide busy cores over the timed runs",
	"loadavg":       "one-minute load average before the bed's (-raw: the stream count's) measurements",
}

func parent() error {
	prov := benchutil.Start("netbed", os.Args[1:])
	var rows []row
	port := 29500
	err := eachBed(20*time.Minute, func(ctx context.Context, hosts int, rate string, bps float64, bed *netbed.Bed) error {
		load := benchutil.LoadAvg()
		res := map[string]map[[2]any]float64{}
		for _, mode := range []string{"0", "1"} {
			port++
			ss, err := job(ctx, bed, hosts, mode, port)
			if err != nil {
				return fmt.Errorf("%d hosts, %s, GP_COMM_HIERARCHY=%s: %w", hosts, rate, mode, err)
			}
			res[mode] = map[[2]any]float64{}
			for _, s := range ss {
				res[mode][[2]any{s.Op, s.Bytes}] = s.Latency
			}
		}
		glooErr := map[[2]any]string{}
		if *python != "" {
			port++
			gs, err := glooJob(ctx, bed, hosts, port)
			if err != nil {
				return fmt.Errorf("%d hosts, %s, gloo: %w", hosts, rate, err)
			}
			res["gloo"] = map[[2]any]float64{}
			for _, s := range gs {
				res["gloo"][[2]any{s.Op, s.Bytes}] = s.Latency
				if s.Error != "" {
					glooErr[[2]any{s.Op, s.Bytes}] = s.Error
				}
			}
		}
		fmt.Fprintf(os.Stderr, "netbed: %d hosts at %s done (load %.1f before, %.1f after)\n", hosts, rate, load, benchutil.LoadAvg())
		n := hosts * *local
		for _, op := range strings.Split(*opsFlag, ",") {
			for _, sz := range strings.Split(*sizes, ",") {
				b, _ := strconv.Atoi(sz)
				fl, hl := res["0"][[2]any{op, b}], res["1"][[2]any{op, b}]
				r := row{Op: op, Hosts: hosts, Local: *local, Rate: rate, Shaping: bed.Shaping, Bytes: b,
					FlatLat: fl, HierLat: hl, Load: load}
				r.FlatBus, r.HierBus = busbw(op, n, b, fl), busbw(op, n, b, hl)
				r.FlatLink, r.HierLink = busbw(op, hosts, b, fl)*1e9/bps, busbw(op, hosts, b, hl)*1e9/bps
				if gl := res["gloo"][[2]any{op, b}]; gl > 0 {
					r.GlooLat, r.GlooBus, r.GlooLink = gl, busbw(op, n, b, gl), busbw(op, hosts, b, gl)*1e9/bps
				} else if *python != "" {
					r.GlooErr = glooErr[[2]any{op, b}]
				}
				rows = append(rows, r)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	printTable(rows)
	prov.End()
	return prov.Save(os.Stdout, *out, benchutil.Rows[row]{Provenance: prov, Units: units, Rows: rows})
}

// eachBed creates a bed for every -hosts count and -rates rate in turn (links delayed by
// -delay), runs fn in it within timeout, and removes it; after each bed it prints the delay
// holder's statistics, if it had one. The first error stops the loop.
func eachBed(timeout time.Duration, fn func(ctx context.Context, hosts int, rate string, bps float64, bed *netbed.Bed) error) error {
	for _, hs := range strings.Split(*hostsFlag, ",") {
		hosts, err := strconv.Atoi(hs)
		if err != nil {
			return fmt.Errorf("-hosts: %w", err)
		}
		for _, rate := range strings.Split(*rates, ",") {
			bps, err := rateBytes(rate)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			bed, err := netbed.Create(ctx, hosts, netbed.Link{Rate: rate, Delay: *delay})
			if err != nil {
				cancel()
				return err
			}
			err = fn(ctx, hosts, rate, bps, bed)
			cerr := bed.Close()
			cancel()
			if err != nil {
				return err
			}
			if cerr != nil {
				return cerr
			}
			if st := bed.DelayStats(); st.Packets > 0 {
				fmt.Fprintf(os.Stderr, "netbed: delay holder: %d packets, released late by p50 %v p90 %v p99 %v, CPU %v (kernel %v)\n",
					st.Packets, st.Late50, st.Late90, st.Late99, st.CPU.Round(time.Millisecond), st.KernelCPU.Round(time.Millisecond))
			}
		}
	}
	return nil
}

// job runs hosts × local workers inside the bed with GP_COMM_HIERARCHY=mode and returns
// rank 0's samples.
func job(ctx context.Context, bed *netbed.Bed, hosts int, mode string, port int) ([]sample, error) {
	n := hosts * *local
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for r := range n {
		cmd := bed.Command(ctx, r / *local, os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), workerEnv+"=1", "GP_COMM_HIERARCHY="+mode, "GP_RDZV_SECRET=netbed",
			"TORCHELASTIC_RUN_ID=netbed", "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r%*local), "LOCAL_WORLD_SIZE="+strconv.Itoa(*local),
			"GROUP_RANK="+strconv.Itoa(r / *local), "MASTER_ADDR="+bed.Addr(0), "MASTER_PORT="+strconv.Itoa(port))
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds[r] = cmd
	}
	var errs []string
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("rank %d: %v: %s", r, err, tail(outs[r].String(), 2000)))
		}
	}
	if errs != nil {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	var ss []sample
	for _, line := range strings.Split(outs[0].String(), "\n") {
		if js, ok := strings.CutPrefix(line, "SAMPLE "); ok {
			var s sample
			if err := json.Unmarshal([]byte(js), &s); err != nil {
				return nil, err
			}
			want := map[string]string{"0": "tcp", "1": "hier"}[mode]
			if s.Transport != want {
				return nil, fmt.Errorf("GP_COMM_HIERARCHY=%s ran on %q, want %q", mode, s.Transport, want)
			}
			ss = append(ss, s)
		}
	}
	return ss, nil
}

func worker() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// One rank of several on this host: the runtime's monitor thread yields the cores to the
	// compute (parallel/sysmon), as in every program the launcher starts.
	if _, err := sysmon.Lower(); err != nil {
		return err
	}
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(5*time.Minute), comm.WithConnectTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	n, r := g.Size(), g.Rank()
	for _, op := range strings.Split(*opsFlag, ",") {
		for _, sz := range strings.Split(*sizes, ",") {
			b, err := strconv.Atoi(sz)
			if err != nil {
				return err
			}
			count := b / 4
			lo, hi := comm.ShardRange(count, n, r)
			full, shard := make([]float32, count), make([]float32, hi-lo)
			for i := range full {
				full[i] = float32(i%97) * 0.25
			}
			var fn func() comm.Work
			switch op {
			case "all-reduce":
				fn = func() comm.Work { return g.AllReduce(comm.F32(full), comm.Sum) }
			case "reduce-scatter":
				fn = func() comm.Work { return g.ReduceScatter(comm.F32(shard), comm.F32(full), comm.Sum) }
			case "all-gather":
				fn = func() comm.Work { return g.AllGather(comm.F32(full), comm.F32(shard)) }
			case "broadcast":
				fn = func() comm.Work { return g.Broadcast(comm.F32(full), 0) }
			default:
				return fmt.Errorf("unknown op %q", op)
			}
			lat, err := timeOp(ctx, g, fn, iters(b))
			if err != nil {
				return fmt.Errorf("%s %d bytes: %w", op, b, err)
			}
			if r == 0 {
				js, _ := json.Marshal(sample{Op: op, Bytes: b, Latency: lat, Transport: comm.TransportOf(g)})
				fmt.Println("SAMPLE " + string(js))
			}
		}
	}
	return nil
}

// timeOp is the median over -reps runs of iters operations of the slowest rank's time per
// operation, after one warm-up.
func timeOp(ctx context.Context, g comm.Group, fn func() comm.Work, iters int) (float64, error) {
	if err := fn().Wait(ctx); err != nil {
		return 0, err
	}
	lats := make([]float64, *reps)
	for i := range lats {
		if err := g.Barrier().Wait(ctx); err != nil {
			return 0, err
		}
		start := time.Now()
		for range iters {
			if err := fn().Wait(ctx); err != nil {
				return 0, err
			}
		}
		lat := comm.F64{time.Since(start).Seconds() / float64(iters)}
		if err := g.AllReduce(lat, comm.Max).Wait(ctx); err != nil {
			return 0, err
		}
		lats[i] = lat[0]
	}
	return benchutil.Median(lats), nil
}

// busbw in GB/s over n participants (see the package comment).
func busbw(op string, n, bytes int, lat float64) float64 {
	if lat == 0 {
		return 0
	}
	alg := float64(bytes) / lat / 1e9
	switch op {
	case "all-reduce":
		return alg * 2 * float64(n-1) / float64(n)
	case "reduce-scatter", "all-gather":
		return alg * float64(n-1) / float64(n)
	}
	return alg
}

// rateBytes is a tc rate ("1gbit") in bytes per second.
func rateBytes(s string) (float64, error) {
	b, err := netbed.RateBits(s)
	return float64(b) / 8, err
}

func printTable(rows []row) {
	fmt.Printf("%-15s %5s %7s %9s %10s %10s %10s %6s %6s %6s %9s %9s %9s\n", "op", "hosts", "rate", "bytes",
		"flat GB/s", "hier GB/s", "gloo GB/s", "flat", "hier", "gloo", "flat ms", "hier ms", "gloo ms")
	fmt.Printf("%-15s %5s %7s %9s %10s %10s %10s %6s %6s %6s %9s %9s %9s\n", "", "xrank", "", "", "busbw", "busbw",
		"busbw", "link", "link", "link", "", "", "")
	for _, r := range rows {
		gb, gl, gms := "n/a", "n/a", "n/a"
		if r.GlooLat > 0 {
			gb, gl, gms = fmt.Sprintf("%.3f", r.GlooBus), fmt.Sprintf("%.2f", r.GlooLink), fmt.Sprintf("%.2f", r.GlooLat*1e3)
		}
		fmt.Printf("%-15s %3dx%d %7s %9d %10.3f %10.3f %10s %6.2f %6.2f %6s %9.2f %9.2f %9s\n", r.Op, r.Hosts, r.Local,
			r.Rate, r.Bytes, r.FlatBus, r.HierBus, gb, r.FlatLink, r.HierLink, gl, r.FlatLat*1e3, r.HierLat*1e3, gms)
	}
	for _, r := range rows {
		if r.GlooErr != "" {
			fmt.Printf("gloo n/a: %s\n", r.GlooErr)
			break
		}
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Rate] {
			seen[r.Rate] = true
			fmt.Printf("%s links: %s; one-minute load average before the bed: %.1f (2 cores)\n", r.Rate, r.Shaping, r.Load)
		}
	}
}

// glooJob runs the gloo benchmark as hosts × local ranks inside the bed, placed as job
// places ours, with the same sizes and iteration counts, and returns rank 0's samples.
func glooJob(ctx context.Context, bed *netbed.Bed, hosts, port int) ([]sample, error) {
	n := hosts * *local
	var plan []string
	for _, sz := range strings.Split(*sizes, ",") {
		b, err := strconv.Atoi(sz)
		if err != nil {
			return nil, err
		}
		plan = append(plan, fmt.Sprintf("%d:%d", b, iters(b)))
	}
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for r := range n {
		cmd := bed.Command(ctx, r / *local, *python, append([]string{*glooPy}, plan...)...)
		cmd.Env = append(os.Environ(), "GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1",
			"GP_BENCH_OPS="+*opsFlag, "GP_BENCH_REPS="+strconv.Itoa(*reps),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR="+bed.Addr(0), "MASTER_PORT="+strconv.Itoa(port))
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds[r] = cmd
	}
	var errs []string
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("gloo rank %d: %v: %s", r, err, tail(outs[r].String(), 2000)))
		}
	}
	if errs != nil {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	var ss []sample
	for _, line := range strings.Split(outs[0].String(), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var s sample
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return nil, err
		}
		ss = append(ss, s)
	}
	return ss, nil
}

// iters is the number of operations per timed run for a buffer of b bytes (ours and gloo's).
func iters(b int) int { return max(2, min(16, (32<<20)/b)) }

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
