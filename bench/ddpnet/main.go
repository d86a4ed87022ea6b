// Command ddpnet benchmarks DDP across 2 hosts of the test bed (internal/netbed: network
// namespaces on a bridge, links shaped by tc): bench/ddp's training job (resnet18 at 64x64,
// batch 16 per rank, one thread per rank) with one rank per host, ours (TCP between the
// hosts) beside PyTorch DDP (gloo, GLOO_SOCKET_IFNAME=eth0) on the same namespaces, for each
// link rate. No gradient compression (bench/compress measures that).
//
// Efficiency is bench/ddp's strict definition: thr(DDP, 2 hosts) / (2 · thr(one plain
// process)), each framework against its own plain process, all measured in the bed. The
// ceiling is two plain processes at once (one per host) over twice one plain process: this
// machine's 2 cores are shared by the two "hosts", which real hosts would not share. Each
// repetition runs every configuration once, interleaved; the table shows medians. Needs
// root, iproute2, and Debian's python3 with torch 1.13 and torchvision for the PyTorch side.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/netbed"
)

// result is what one bench/ddp (or torch_ddp.py) process reports, the fields used here.
type result struct {
	Rank     int     `json:"rank"`
	Seconds  float64 `json:"seconds"`
	Imgs     int     `json:"imgs"`
	Buckets  int     `json:"buckets"`
	Overlap  float64 `json:"overlap_fraction"`
	Backward float64 `json:"backward_s"`
	AllRed   float64 `json:"allreduce_s"`
	Wait     float64 `json:"wait_s"`
}

// row is one link rate's medians.
type row struct {
	Rate       string    `json:"rate"`
	Shaping    string    `json:"shaping"`
	Plain      float64   `json:"imgs_per_s_plain"`
	DDP        float64   `json:"imgs_per_s_ddp2"`
	Eff        float64   `json:"efficiency"`
	Effs       []float64 `json:"efficiency_per_repetition"`
	Ceiling    float64   `json:"no_comm_ceiling"`
	TorchPlain float64   `json:"torch_imgs_per_s_plain,omitempty"`
	TorchDDP   float64   `json:"torch_imgs_per_s_ddp2,omitempty"`
	TorchEff   float64   `json:"torch_efficiency,omitempty"`
	TorchEffs  []float64 `json:"torch_efficiency_per_repetition,omitempty"`
	TorchNote  string    `json:"torch_note,omitempty"`
	// Per step, rank 0 of our DDP (median repetition): backward, all-reduce (launch to
	// end, summed over buckets), the wait after backward, and the fraction of the
	// all-reduce hidden behind backward.
	StepS     float64   `json:"ddp_step_s"`
	Backward  float64   `json:"backward_s_per_step"`
	AllReduce float64   `json:"allreduce_s_per_step"`
	Wait      float64   `json:"wait_s_per_step"`
	Overlap   float64   `json:"overlap_fraction"`
	Buckets   int       `json:"buckets"`
	Loads     []float64 `json:"loadavg_per_repetition"`
}

var (
	rates   = flag.String("rates", "1gbit,10gbit", "link rates (tc syntax)")
	reps    = flag.Int("reps", 3, "repetitions")
	steps   = flag.Int("steps", 16, "timed steps per configuration")
	warmup  = flag.Int("warmup", 2, "untimed steps first")
	batch   = flag.Int("batch", 16, "batch per rank")
	size    = flag.Int("size", 64, "image side")
	procs   = flag.Int("procs", 1, "GOMAXPROCS of each of our processes")
	python  = flag.String("python", "/usr/bin/python3", "Python with torch 1.13 and torchvision (\"\": skip PyTorch)")
	outFlag = flag.String("o", filepath.Join("bench", "results", "ddpnet.json"), "JSON output")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	tmp, err := os.MkdirTemp("", "ddpnet")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ours := filepath.Join(tmp, "ddp")
	if out, err := exec.Command("go", "build", "-o", ours, "./bench/ddp").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./bench/ddp: %v: %s", err, out)
	}
	args := []string{"-steps", strconv.Itoa(*steps), "-warmup", strconv.Itoa(*warmup), "-batch", strconv.Itoa(*batch),
		"-size", strconv.Itoa(*size), "-trace", "", "-shared-grads=false"}
	targs := []string{"--steps", strconv.Itoa(*steps), "--warmup", strconv.Itoa(*warmup), "--batch", strconv.Itoa(*batch), "--size", strconv.Itoa(*size)}
	script := filepath.Join("bench", "ddp", "torch_ddp.py")
	env := []string{"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "GOMAXPROCS=" + strconv.Itoa(*procs)}
	fmt.Printf("resnet18 %dx%d, batch %d per rank, %d timed steps after %d warm-up, 2 hosts x 1 rank, GOMAXPROCS=%d, %d repetitions\n",
		*size, *size, *batch, *steps, *warmup, *procs, *reps)
	var rows []row
	port := 29600
	for _, rate := range strings.Split(*rates, ",") {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		bed, err := netbed.Create(ctx, 2, netbed.Link{Rate: rate})
		if err != nil {
			cancel()
			return err
		}
		r := row{Rate: rate, Shaping: bed.Shaping}
		var plains, ddps, pairs, ceils, tPlains, tDDPs []float64
		var rank0 []result
		launch := func(n int, cmd []string, extra []string) ([]result, error) {
			port++
			return inBed(ctx, bed, n, cmd, append(append(env, extra...), "MASTER_PORT="+strconv.Itoa(port)))
		}
		for rep := range *reps {
			r.Loads = append(r.Loads, benchutil.LoadAvg())
			plain, err := launch(1, append([]string{ours}, args...), []string{"GP_BENCH_DDP_ROLE=plain"})
			if err != nil {
				bed.Close()
				cancel()
				return fmt.Errorf("%s plain: %w", rate, err)
			}
			dist, err := launch(2, append([]string{ours}, args...), []string{"GP_BENCH_DDP_ROLE=ddp", "GP_RDZV_SECRET=ddpnet"})
			if err != nil {
				bed.Close()
				cancel()
				return fmt.Errorf("%s DDP: %w", rate, err)
			}
			pair, err := launch(2, append([]string{ours}, args...), []string{"GP_BENCH_DDP_ROLE=plain"})
			if err != nil {
				bed.Close()
				cancel()
				return fmt.Errorf("%s two plain: %w", rate, err)
			}
			tp, tpl, td := throughput(plain), throughput(pair), throughput(dist)
			plains, ddps, pairs = append(plains, tp), append(ddps, td), append(pairs, tpl)
			r.Effs, ceils = append(r.Effs, td/(2*tp)), append(ceils, tpl/(2*tp))
			rank0 = append(rank0, dist[0])
			line := fmt.Sprintf("%s rep %d (load %.1f): ours plain %.2f, DDP %.2f img/s, efficiency %.3f (ceiling %.3f)",
				rate, rep+1, r.Loads[rep], tp, td, r.Effs[rep], ceils[rep])
			if *python != "" && r.TorchNote == "" {
				tplain, err := launch(1, append([]string{*python, script, "--mode", "plain"}, targs...), nil)
				var tdist []result
				if err == nil {
					tdist, err = launch(2, append([]string{*python, script, "--mode", "ddp"}, targs...), []string{"GLOO_SOCKET_IFNAME=eth0"})
				}
				if err != nil {
					r.TorchNote = "PyTorch unavailable: " + benchutil.FirstLine(err.Error())
				} else {
					a, b := throughput(tplain), throughput(tdist)
					tPlains, tDDPs, r.TorchEffs = append(tPlains, a), append(tDDPs, b), append(r.TorchEffs, b/(2*a))
					line += fmt.Sprintf("; PyTorch plain %.2f, DDP %.2f img/s, efficiency %.3f", a, b, b/(2*a))
				}
			}
			fmt.Println(line)
		}
		if err := bed.Close(); err != nil {
			cancel()
			return err
		}
		cancel()
		r.Plain, r.DDP, r.Eff, r.Ceiling = benchutil.Median(plains), benchutil.Median(ddps), benchutil.Median(r.Effs), benchutil.Median(ceils)
		if len(r.TorchEffs) > 0 {
			r.TorchPlain, r.TorchDDP, r.TorchEff = benchutil.Median(tPlains), benchutil.Median(tDDPs), benchutil.Median(r.TorchEffs)
		}
		mid := medianIndex(r.Effs)
		s0, n := rank0[mid], float64(*steps)
		r.StepS, r.Backward, r.AllReduce, r.Wait = s0.Seconds/n, s0.Backward/n, s0.AllRed/n, s0.Wait/n
		r.Overlap, r.Buckets = s0.Overlap, s0.Buckets
		rows = append(rows, r)
	}
	printTable(rows)
	js, err := json.MarshalIndent(rows, "", " ")
	if err != nil {
		return err
	}
	fmt.Println("JSON " + *outFlag)
	return os.WriteFile(*outFlag, append(js, '\n'), 0o644)
}

// inBed runs n ranks of cmd, rank r in host r, with the torchrun variables and env, and
// returns the JSON line each printed last.
func inBed(ctx context.Context, bed *netbed.Bed, n int, cmd []string, env []string) ([]result, error) {
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	errb := make([]*bytes.Buffer, n)
	for r := range n {
		c := bed.Command(ctx, r, cmd[0], cmd[1:]...)
		c.Env = append(append(os.Environ(), env...), "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "GROUP_RANK="+strconv.Itoa(r), "MASTER_ADDR="+bed.Addr(0),
			"TORCHELASTIC_RUN_ID=ddpnet")
		outs[r], errb[r] = new(bytes.Buffer), new(bytes.Buffer)
		c.Stdout, c.Stderr = outs[r], errb[r]
		if err := c.Start(); err != nil {
			return nil, err
		}
		cmds[r] = c
	}
	res := make([]result, n)
	var errs []string
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("rank %d: %v: %s", r, err, tail(errb[r].String(), 1500)))
			continue
		}
		found := false
		sc := bufio.NewScanner(outs[r])
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &res[r]) == nil {
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Sprintf("rank %d printed no result: %s", r, tail(outs[r].String()+errb[r].String(), 1500)))
		}
	}
	if errs != nil {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return res, nil
}

func throughput(rs []result) float64 {
	imgs, secs := 0, 0.0
	for _, r := range rs {
		imgs += r.Imgs
		secs = max(secs, r.Seconds)
	}
	return float64(imgs) / secs
}

// medianIndex is the index of xs's median element (the lower one for an even count).
func medianIndex(xs []float64) int {
	best, m := 0, benchutil.Median(xs)
	for i, x := range xs {
		if abs(x-m) < abs(xs[best]-m) {
			best = i
		}
	}
	return best
}

func abs(x float64) float64 { return max(x, -x) }

func printTable(rows []row) {
	fmt.Println()
	fmt.Printf("%-7s %9s %9s %7s %8s | %9s %9s %7s | %7s %7s %7s %7s %5s\n", "link", "plain", "DDP", "eff", "ceiling",
		"torch", "torch", "torch", "step", "bwd", "allred", "wait", "hid")
	fmt.Printf("%-7s %9s %9s %7s %8s | %9s %9s %7s | %7s %7s %7s %7s %5s\n", "", "img/s", "img/s", "", "", "plain", "DDP", "eff",
		"s", "s", "s", "s", "")
	for _, r := range rows {
		tp, td, te := "n/a", "n/a", "n/a"
		if r.TorchEff > 0 {
			tp, td, te = fmt.Sprintf("%.2f", r.TorchPlain), fmt.Sprintf("%.2f", r.TorchDDP), fmt.Sprintf("%.3f", r.TorchEff)
		}
		fmt.Printf("%-7s %9.2f %9.2f %7.3f %8.3f | %9s %9s %7s | %7.3f %7.3f %7.3f %7.3f %5.2f\n", r.Rate, r.Plain, r.DDP,
			r.Eff, r.Ceiling, tp, td, te, r.StepS, r.Backward, r.AllReduce, r.Wait, r.Overlap)
	}
	for _, r := range rows {
		fmt.Printf("%s: %s; one-minute load average per repetition %v (2 cores)", r.Rate, r.Shaping, r.Loads)
		if r.TorchNote != "" {
			fmt.Print("; " + r.TorchNote)
		}
		fmt.Println()
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
