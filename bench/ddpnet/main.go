// Command ddpnet benchmarks DDP across 2 hosts of the test bed (internal/netbed: network
// namespaces on a bridge, links shaped by tc): bench/ddp's training job (resnet18 at 64x64,
// batch 16 per rank, one thread per rank) with one rank per host, ours (TCP between the
// hosts) beside PyTorch DDP (gloo, GLOO_SOCKET_IFNAME=eth0) on the same namespaces, for each
// link rate and each DDP communication hook of -hooks: none (the averaging all-reduce), fp16
// and bf16 (16-bit values on the wire; torch's default_hooks.fp16_compress_hook and
// bf16_compress_hook) and powersgd (torch's powerSGD_hook, PowerSGDState with the same
// -powersgd-rank and -powersgd-start on both sides; error feedback and warm start on). A
// PyTorch hook that fails on gloo is reported as "n/a: <its error>"; PyTorch's PowerSGD,
// which gloo fails with DDP's default 25 MiB buckets, is then measured with
// -torch-powersgd-bucket-mb buckets, and the note says so.
//
// Efficiency is bench/ddp's strict definition: thr(DDP, 2 hosts) / (2 · thr(one plain
// process)), each framework against its own plain process, all measured in the bed. The
// ceiling is two plain processes at once (one per host) over twice one plain process: this
// machine's 2 cores are shared by the two "hosts", which real hosts would not share. Bytes
// per step are host 1's eth0 tx bytes (payload and TCP/IP headers, one direction; host 0
// also sends DDP's initial broadcast) over the run, per step (for PowerSGD: less its
// uncompressed warm-up steps, counted at the same repetition's uncompressed rate, over the
// timed steps). Each repetition runs every configuration once, interleaved; the table shows
// medians. Rows already in -o from the run before -hooks, and those of other rates, are kept.
// Needs root, iproute2, and Debian's python3 with torch 1.13 and torchvision for the PyTorch
// side; the beds are removed on every exit path, SIGINT and SIGTERM included.
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
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// row is one link rate and hook's medians.
type row struct {
	Rate       string    `json:"rate"`
	Hook       string    `json:"hook"`
	Run        string    `json:"run,omitempty"` // "earlier": a row kept from the run before -hooks
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
	// DDP step times (slowest rank, seconds per timed step, median) and the bytes host 1
	// sent on its eth0 per timed step (median): the whole run's tx bytes less the warm-up
	// steps counted at the uncompressed run's rate (PowerSGD's warm-up steps are plain
	// all-reduces), over the timed steps. Payload plus TCP/IP headers, one direction.
	TorchStepS float64 `json:"torch_ddp_step_s,omitempty"`
	TxMB       float64 `json:"tx_mb_per_step,omitempty"`
	TorchTxMB  float64 `json:"torch_tx_mb_per_step,omitempty"`
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

// units says the unit of the row fields whose names do not. Rows marked run=earlier were
// measured by an earlier run, not by the command the file records.
var units = map[string]string{
	"rate":                   "link rate of each host, tc syntax (bits per second)",
	"efficiency":             "fraction: DDP world 2's images/s over twice one plain process's (so are torch_efficiency, no_comm_ceiling and the per-repetition lists)",
	"overlap_fraction":       "fraction of the all-reduce time hidden behind backward",
	"tx_mb_per_step":         "MB (10^6 bytes) host 1 sent on eth0 per timed step, headers included",
	"loadavg_per_repetition": "one-minute load average of each repetition",
}

var (
	rates     = flag.String("rates", "1gbit,10gbit", "link rates (tc syntax)")
	hooksFlag = flag.String("hooks", "none,fp16,bf16,powersgd", "DDP communication hooks: none, fp16, bf16, powersgd (both frameworks)")
	psgdRank  = flag.Int("powersgd-rank", 1, "PowerSGD matrix_approximation_rank")
	psgdStart = flag.Int("powersgd-start", 2, "PowerSGD start_powerSGD_iter (<= -warmup: every timed step is compressed)")
	torchCap  = flag.Float64("torch-powersgd-bucket-mb", 200, "bucket_cap_mb PyTorch's PowerSGD falls back to when it fails with DDP's default 25 MiB buckets on gloo (0: no fallback)")
	reps      = flag.Int("reps", 3, "repetitions")
	steps     = flag.Int("steps", 16, "timed steps per configuration")
	warmup    = flag.Int("warmup", 2, "untimed steps first")
	batch     = flag.Int("batch", 16, "batch per rank")
	size      = flag.Int("size", 64, "image side")
	procs     = flag.Int("procs", 1, "GOMAXPROCS of each of our processes")
	python    = flag.String("python", "/usr/bin/python3", "Python with torch 1.13 and torchvision (\"\": skip PyTorch)")
	keep      = flag.Bool("keep-earlier", true, "keep the rows of -o that have no hook (the run before -hooks, marked run=earlier) and those of rate and hook pairs this run does not measure")
	outFlag   = flag.String("o", filepath.Join("bench", "results", "ddpnet.json"), "JSON output")
)

func main() {
	flag.Parse()
	// SIGINT and SIGTERM cancel ctx: the ranks are killed and the beds removed (deferred).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// hookRun is one repetition's measurement of one hook on one rate.
type hookRun struct {
	ours, torch     float64 // throughput, img/s
	oursStep, tStep float64 // seconds per timed step, slowest rank
	oursTx, torchTx float64 // host 1 eth0 tx bytes over the whole run
	rank0           result
	torchOK         bool
}

func run(ctx context.Context) error {
	prov := benchutil.Start("ddpnet", os.Args[1:])
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
	hooks := strings.Split(*hooksFlag, ",")
	fmt.Printf("resnet18 %dx%d, batch %d per rank, %d timed steps after %d warm-up, 2 hosts x 1 rank, GOMAXPROCS=%d, %d repetitions, hooks %s (PowerSGD rank %d, start iteration %d)\n",
		*size, *size, *batch, *steps, *warmup, *procs, *reps, *hooksFlag, *psgdRank, *psgdStart)
	var rows []row
	for _, rate := range strings.Split(*rates, ",") {
		rs, err := onRate(ctx, rate, hooks, ours, args, targs, script, env)
		rows = append(rows, rs...)
		if err != nil {
			return err
		}
	}
	if *keep {
		rows = append(rows, earlier(*outFlag)...)
	}
	printTable(rows)
	prov.End()
	return prov.Save(os.Stdout, *outFlag, benchutil.Rows[row]{Provenance: prov, Units: units, Rows: rows})
}

// earlier is the rows of the JSON file at path to keep: those written before -hooks existed
// (marked run=earlier) and those of rate and hook pairs this run does not measure.
func earlier(path string) []row {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	old, err := benchutil.DecodeRows[row](b)
	if err != nil {
		return nil
	}
	now := map[[2]string]bool{}
	for _, r := range strings.Split(*rates, ",") {
		for _, h := range strings.Split(*hooksFlag, ",") {
			now[[2]string{r, h}] = true
		}
	}
	var keep []row
	for _, r := range old {
		switch {
		case r.Hook == "" || r.Run == "earlier":
			r.Hook, r.Run = "none", "earlier"
			keep = append(keep, r)
		case !now[[2]string{r.Rate, r.Hook}]:
			keep = append(keep, r)
		}
	}
	return keep
}

// onRate measures every hook on one bed shaped to rate and removes the bed whatever happens.
func onRate(ctx context.Context, rate string, hooks []string, ours string, args, targs []string, script string, env []string) (rows []row, err error) {
	ctx, cancel := context.WithTimeout(ctx, 45*time.Minute)
	defer cancel()
	bed, err := netbed.Create(ctx, 2, netbed.Link{Rate: rate})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := bed.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	port := 29600
	launch := func(n int, cmd []string, extra []string) ([]result, float64, error) {
		port++
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Minute)
		defer lcancel()
		tx0, err := txBytes(lctx, bed, 1)
		if err != nil {
			return nil, 0, err
		}
		res, err := inBed(lctx, bed, n, cmd, append(append(append([]string(nil), env...), extra...), "MASTER_PORT="+strconv.Itoa(port)))
		if err != nil {
			return nil, 0, err
		}
		tx1, err := txBytes(lctx, bed, 1)
		return res, tx1 - tx0, err
	}
	var loads, plains, pairs, tPlains []float64
	runs := map[string][]hookRun{}
	torchNote := map[string]string{}
	torchCapUsed := 0.0
	torchOff := ""
	for rep := range *reps {
		loads = append(loads, benchutil.LoadAvg())
		plain, _, err := launch(1, append([]string{ours}, args...), []string{"GP_BENCH_DDP_ROLE=plain"})
		if err != nil {
			return rows, fmt.Errorf("%s plain: %w", rate, err)
		}
		pair, _, err := launch(2, append([]string{ours}, args...), []string{"GP_BENCH_DDP_ROLE=plain"})
		if err != nil {
			return rows, fmt.Errorf("%s two plain: %w", rate, err)
		}
		tp, tpl := throughput(plain), throughput(pair)
		plains, pairs = append(plains, tp), append(pairs, tpl)
		line := fmt.Sprintf("%s rep %d (load %.1f): ours plain %.2f img/s, two plain %.2f", rate, rep+1, loads[rep], tp, tpl)
		tplain := 0.0
		if *python != "" && torchOff == "" {
			r, _, err := launch(1, append([]string{*python, script, "--mode", "plain"}, targs...), nil)
			if err != nil {
				torchOff = "PyTorch unavailable: " + benchutil.FirstLine(err.Error())
			} else {
				tplain = throughput(r)
				tPlains = append(tPlains, tplain)
				line += fmt.Sprintf("; PyTorch plain %.2f", tplain)
			}
		}
		fmt.Println(line)
		for _, hook := range hooks {
			h := hookRun{}
			hargs := append(append([]string{}, args...), "-hook", ourHook(hook), "-powersgd-start", strconv.Itoa(*psgdStart))
			dist, tx, err := launch(2, append([]string{ours}, hargs...), []string{"GP_BENCH_DDP_ROLE=ddp", "GP_RDZV_SECRET=ddpnet"})
			if err != nil {
				return rows, fmt.Errorf("%s DDP hook %s: %w", rate, hook, err)
			}
			h.ours, h.oursStep, h.oursTx, h.rank0 = throughput(dist), slowest(dist)/float64(*steps), tx, dist[0]
			line := fmt.Sprintf("  %s %-8s load %.1f: ours DDP %.2f img/s, eff %.3f, step %.3f s, host-1 tx %.1f MB/run",
				rate, hook, benchutil.LoadAvg(), h.ours, h.ours/(2*tp), h.oursStep, tx/1e6)
			if tplain > 0 && !strings.HasPrefix(torchNote[hook], "n/a") {
				t := append([]string{*python, script, "--mode", "ddp", "--hook", hook, "--powersgd-rank", strconv.Itoa(*psgdRank),
					"--powersgd-start", strconv.Itoa(*psgdStart)}, targs...)
				if hook == "powersgd" && torchCapUsed > 0 {
					t = append(t, "--bucket-cap-mb", strconv.FormatFloat(torchCapUsed, 'g', -1, 64))
				}
				tdist, ttx, err := launch(2, t, []string{"GLOO_SOCKET_IFNAME=eth0"})
				if err != nil && hook == "powersgd" && torchCapUsed == 0 && *torchCap > 0 {
					// gloo fails PyTorch's PowerSGD with several buckets (their collectives are
					// issued from future callbacks whose order differs between ranks): say so
					// and measure it with larger buckets.
					torchNote[hook] = fmt.Sprintf("25 MiB buckets: n/a: %s; measured with bucket_cap_mb=%g", gist(err.Error()), *torchCap)
					torchCapUsed = *torchCap
					t = append(t, "--bucket-cap-mb", strconv.FormatFloat(torchCapUsed, 'g', -1, 64))
					tdist, ttx, err = launch(2, t, []string{"GLOO_SOCKET_IFNAME=eth0"})
				}
				if err != nil {
					torchNote[hook] = "n/a: " + gist(err.Error())
					line += "; PyTorch " + torchNote[hook]
				} else {
					h.torch, h.tStep, h.torchTx, h.torchOK = throughput(tdist), slowest(tdist)/float64(*steps), ttx, true
					line += fmt.Sprintf("; PyTorch DDP %.2f img/s, eff %.3f, step %.3f s, host-1 tx %.1f MB/run", h.torch, h.torch/(2*tplain), h.tStep, ttx/1e6)
				}
			}
			fmt.Println(line)
			runs[hook] = append(runs[hook], h)
		}
	}
	ceils := make([]float64, len(plains))
	for i := range plains {
		ceils[i] = pairs[i] / (2 * plains[i])
	}
	for _, hook := range hooks {
		r := row{Rate: rate, Hook: hook, Shaping: bed.Shaping, Loads: loads, TorchNote: torchNote[hook]}
		if torchOff != "" {
			r.TorchNote = torchOff
		}
		hr := runs[hook]
		var ddps, steps_, txs, tDDPs, tSteps, tTxs []float64
		for i, h := range hr {
			ddps = append(ddps, h.ours)
			r.Effs = append(r.Effs, h.ours/(2*plains[i]))
			steps_ = append(steps_, h.oursStep)
			txs = append(txs, timedTx(hook, h.oursTx, runs["none"], i, false))
			if h.torchOK && i < len(tPlains) {
				tDDPs, tSteps = append(tDDPs, h.torch), append(tSteps, h.tStep)
				r.TorchEffs = append(r.TorchEffs, h.torch/(2*tPlains[i]))
				tTxs = append(tTxs, timedTx(hook, h.torchTx, runs["none"], i, true))
			}
		}
		r.Plain, r.DDP, r.Eff, r.Ceiling = benchutil.Median(plains), benchutil.Median(ddps), benchutil.Median(r.Effs), benchutil.Median(ceils)
		r.TxMB = benchutil.Median(txs) / 1e6
		if len(r.TorchEffs) > 0 {
			r.TorchPlain, r.TorchDDP, r.TorchEff = benchutil.Median(tPlains), benchutil.Median(tDDPs), benchutil.Median(r.TorchEffs)
			r.TorchStepS, r.TorchTxMB = benchutil.Median(tSteps), benchutil.Median(tTxs)/1e6
		}
		s0, n := hr[medianIndex(r.Effs)].rank0, float64(*steps)
		r.StepS, r.Backward, r.AllReduce, r.Wait = benchutil.Median(steps_), s0.Backward/n, s0.AllRed/n, s0.Wait/n
		r.Overlap, r.Buckets = s0.Overlap, s0.Buckets
		rows = append(rows, r)
	}
	return rows, nil
}

// timedTx is the tx bytes per timed step of a run that sent total in all: the run's average,
// except for PowerSGD, whose warm-up steps (plain all-reduces, before its start iteration)
// are counted at the rate of the same repetition's uncompressed run and taken off.
func timedTx(hook string, total float64, none []hookRun, i int, torch bool) float64 {
	all := float64(*warmup + *steps)
	per := total / all
	if hook == "powersgd" && i < len(none) {
		if torch && none[i].torchOK {
			per = none[i].torchTx / all
		} else if !torch {
			per = none[i].oursTx / all
		}
	}
	return (total - float64(*warmup)*per) / float64(*steps)
}

// ourHook is bench/ddp's -hook for a hook name.
func ourHook(h string) string {
	if h == "powersgd" {
		return "powersgd" + strconv.Itoa(*psgdRank)
	}
	return h
}

// txBytes is host i's eth0 tx byte counter.
func txBytes(ctx context.Context, bed *netbed.Bed, i int) (float64, error) {
	out, err := bed.Command(ctx, i, "cat", "/sys/class/net/eth0/statistics/tx_bytes").Output()
	if err != nil {
		return 0, fmt.Errorf("host %d tx_bytes: %w", i, err)
	}
	return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
}

// gist is the line of a failed PyTorch run's output that says why: gloo's enforce failure,
// else the last exception line.
func gist(s string) string {
	best, rank := "", 0
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		r := 0
		switch {
		case strings.Contains(l, "enforce fail"):
			r = 3
		case strings.Contains(l, "what():"):
			r = 2
		case strings.Contains(l, "Error:"):
			r = 1
		}
		if r > 0 && r >= rank {
			best, rank = l, r
		}
	}
	if best == "" {
		best = benchutil.FirstLine(s)
	}
	if i := strings.LastIndex(best, "RuntimeError: "); i > 0 && rank < 3 {
		best = best[i:]
	}
	return best[:min(len(best), 200)]
}

func slowest(rs []result) float64 {
	s := 0.0
	for _, r := range rs {
		s = max(s, r.Seconds)
	}
	return s
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
	fmt.Printf("%-7s %-9s %8s %8s %6s %6s %7s %7s | %8s %6s %7s %7s | %5s %6s %5s\n", "link", "hook", "plain", "DDP", "eff", "ceil",
		"step", "tx", "torch", "torch", "torch", "torch", "bwd", "allred", "hid")
	fmt.Printf("%-7s %-9s %8s %8s %6s %6s %7s %7s | %8s %6s %7s %7s | %5s %6s %5s\n", "", "", "img/s", "img/s", "", "",
		"s", "MB/step", "DDP i/s", "eff", "step s", "MB/step", "s", "s", "")
	for _, r := range rows {
		name := r.Hook
		if r.Run != "" {
			name += "*"
		}
		tdd, te, ts, tt := "n/a", "n/a", "-", "-"
		if r.TorchEff > 0 {
			tdd, te = fmt.Sprintf("%.2f", r.TorchDDP), fmt.Sprintf("%.3f", r.TorchEff)
		}
		if r.TorchStepS > 0 {
			ts, tt = fmt.Sprintf("%.3f", r.TorchStepS), fmt.Sprintf("%.1f", r.TorchTxMB)
		}
		tx := "-"
		if r.TxMB > 0 {
			tx = fmt.Sprintf("%.1f", r.TxMB)
		}
		fmt.Printf("%-7s %-9s %8.2f %8.2f %6.3f %6.3f %7.3f %7s | %8s %6s %7s %7s | %5.3f %6.3f %5.2f\n", r.Rate, name, r.Plain, r.DDP,
			r.Eff, r.Ceiling, r.StepS, tx, tdd, te, ts, tt, r.Backward, r.AllReduce, r.Overlap)
	}
	fmt.Println("*: a row of the earlier run (before -hooks; 16 timed steps).")
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Run == "" && !seen[r.Rate] {
			seen[r.Rate] = true
			fmt.Printf("%s: %s; one-minute load average per repetition %v (2 cores)\n", r.Rate, r.Shaping, r.Loads)
		}
		if r.TorchNote != "" {
			fmt.Printf("%s %s: PyTorch %s\n", r.Rate, r.Hook, r.TorchNote)
		}
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
