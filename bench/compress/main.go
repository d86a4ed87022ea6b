// Command compress measures DDP's gradient compression hooks where links are slow: 2 hosts of the multi-host test bed (internal/netbed: network namespaces on a
// bridge, each host's link shaped by tc) with one rank each (-ranks-per-host for more:
// shared memory inside a host, TCP between), training the same model for the same steps with
// each hook: none (the averaging all-reduce), fp16 and bf16 (16-bit values on
// the wire) and PowerSGD at ranks 1 and 4 (error feedback, warm start, plain all-reduce for
// the first -powersgd-start steps), per link rate.
//
// The model is an MLP on Fashion-MNIST (784-1024-1024-10, 1.86 M parameters, 7.5 MB of
// float32 gradients per step, one bucket cut by DDP's defaults) with SGD (momentum 0.9) on a
// global batch of 2×64: its gradients are large next to its compute, as in the models that
// compression is for. Every hook sees the same data in the same order.
//
// Reported per rate and hook: median step time (seconds, steps after the first 10 and after
// PowerSGD's start), bytes on the wire per step (the host's eth0 tx bytes over the timed
// steps: payload, TCP/IP headers and the loss all-reduce, one host's direction), the time
// from the first step until the training loss (global batch mean, averaged over the last 20
// steps) first falls below -target, the final such loss, and rank 0's accuracy on the 10,000
// test images. Needs root and iproute2; every namespace is removed on every exit path,
// including SIGINT and SIGTERM. -local runs the ranks on loopback without a bed (to size
// -target; the link columns then mean nothing).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/netbed"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/ddp/commhook"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
)

var (
	rates     = flag.String("rates", "1gbit,100mbit", "link rates (tc syntax)")
	hooksFlag = flag.String("hooks", "none,fp16,bf16,powersgd1,powersgd4", "hooks: none, fp16, bf16, powersgdR (rank R)")
	steps     = flag.Int("steps", 200, "training steps per run")
	per       = flag.Int("batch", 64, "batch per rank")
	lr        = flag.Float64("lr", 0.05, "SGD learning rate (momentum 0.9)")
	target    = flag.Float64("target", 0.6, "training loss (mean of the last 20 steps) that time-to-loss is measured to")
	start     = flag.Int("powersgd-start", 10, "start_powerSGD_iter")
	hidden    = flag.Int("hidden", 1024, "width of the two hidden layers")
	trainN    = flag.Int("train-samples", 20000, "Fashion-MNIST training images used (a fixed shuffled order)")
	dataDir   = flag.String("data", "", "Fashion-MNIST directory (default data.FashionMNISTDir)")
	local     = flag.Bool("local", false, "run on loopback without a test bed")
	perHost   = flag.Int("ranks-per-host", 1, "ranks on each of the 2 hosts (more than 1: shared memory inside a host, TCP between hosts)")
	out       = flag.String("o", filepath.Join("bench", "results", "compress.json"), "JSON output (the table goes beside it as .txt)")
)

const workerEnv = "GP_COMPRESS_BENCH_WORKER"

// result is one run, as rank 0 reports it.
type result struct {
	Rate        string  `json:"rate"`
	Shaping     string  `json:"shaping"`
	Hook        string  `json:"hook"`
	Hosts       int     `json:"hosts"`
	PerHost     int     `json:"ranks_per_host"`
	Steps       int     `json:"steps"`
	StepS       float64 `json:"median_step_s"`
	WireBytes   float64 `json:"wire_bytes_per_step"`
	GradBytes   int     `json:"gradient_bytes_per_step"`
	TimeToLoss  float64 `json:"time_to_target_s"` // -1: not reached within Steps
	StepsToLoss int     `json:"steps_to_target"`  // -1: not reached
	Target      float64 `json:"target_loss"`
	FinalLoss   float64 `json:"final_loss"`
	TestAcc     float64 `json:"test_accuracy"`
	TotalS      float64 `json:"train_s"`
	Load        float64 `json:"loadavg_before"`
}

// units says the unit of the result fields whose names do not.
var units = map[string]string{
	"target_loss":    "training loss (a cross-entropy, no unit), the mean of the last 20 steps",
	"final_loss":     "training loss (a cross-entropy, no unit), the mean of the last 20 steps",
	"test_accuracy":  "fraction of the test images classified right",
	"loadavg_before": "one-minute load average before the run",
}

func main() {
	flag.Parse()
	var err error
	if os.Getenv(workerEnv) != "" {
		err = worker()
	} else {
		err = parent()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compress:", err)
		os.Exit(1)
	}
}

func parent() error {
	// SIGINT and SIGTERM cancel ctx: the jobs' processes are killed and the deferred Close
	// removes the bed's namespaces before main returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	prov := benchutil.Start("compress", os.Args[1:])
	var rows []result
	port := 29600
	for _, rate := range strings.Split(*rates, ",") {
		rs, err := onRate(ctx, rate, &port)
		rows = append(rows, rs...)
		if err != nil {
			return err
		}
	}
	table := formatTable(rows)
	fmt.Print(table)
	prov.End()
	if err := prov.Save(os.Stdout, *out, benchutil.Rows[result]{Provenance: prov, Units: units, Rows: rows}); err != nil {
		return err
	}
	txt := strings.TrimSuffix(*out, filepath.Ext(*out)) + ".txt"
	fmt.Println("table:", txt)
	return os.WriteFile(txt, []byte(commandLine(prov.Command)+"\n\n"+table), 0o644)
}

// onRate runs every hook on one bed shaped to rate, and removes the bed whatever happens.
func onRate(ctx context.Context, rate string, port *int) (rows []result, err error) {
	var bed *netbed.Bed
	shaping := "loopback"
	if !*local {
		bed, err = netbed.Create(ctx, 2, netbed.Link{Rate: rate})
		if err != nil {
			return nil, err
		}
		defer func() {
			if cerr := bed.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}()
		shaping = bed.Shaping
	}
	for _, hook := range strings.Split(*hooksFlag, ",") {
		*port++
		load := benchutil.LoadAvg()
		r, err := job(ctx, bed, hook, *port)
		if err != nil {
			return rows, fmt.Errorf("%s, hook %s: %w", rate, hook, err)
		}
		r.Rate, r.Shaping, r.Load, r.Hosts, r.PerHost = rate, shaping, load, 2, *perHost
		fmt.Fprintf(os.Stderr, "compress: %s %-10s step %.3f s, %.2f MB/step on the wire, loss %.3f, test acc %.3f\n",
			rate, hook, r.StepS, r.WireBytes/1e6, r.FinalLoss, r.TestAcc)
		rows = append(rows, *r)
	}
	return rows, nil
}

// job runs the 2 ranks of one hook (each on its host, or both on loopback) and returns rank
// 0's result.
func job(ctx context.Context, bed *netbed.Bed, hook string, port int) (*result, error) {
	hosts, lpr := 2, *perHost
	n := hosts * lpr
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	addr := "127.0.0.1"
	if bed != nil {
		addr = bed.Addr(0)
	}
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for r := range n {
		args := append(os.Args[1:], "-hooks", hook)
		var cmd *exec.Cmd
		if bed != nil {
			cmd = bed.Command(ctx, r/lpr, os.Args[0], args...)
		} else {
			cmd = exec.CommandContext(ctx, os.Args[0], args...)
		}
		cmd.Env = append(os.Environ(), workerEnv+"=1", "GP_RDZV_SECRET=compress", "OPENBLAS_NUM_THREADS=1",
			"TORCHELASTIC_RUN_ID=compress", "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r%lpr), "LOCAL_WORLD_SIZE="+strconv.Itoa(lpr), "GROUP_RANK="+strconv.Itoa(r/lpr),
			"MASTER_ADDR="+addr, "MASTER_PORT="+strconv.Itoa(port))
		if bed == nil {
			cmd.Env = append(cmd.Env, "LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n), "GROUP_RANK=0")
		}
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			cancel()
			for _, c := range cmds[:r] {
				_ = c.Wait()
			}
			return nil, err
		}
		cmds[r] = cmd
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w: %s", r, err, tail(outs[r].String(), 1500)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, line := range strings.Split(outs[0].String(), "\n") {
		if js, ok := strings.CutPrefix(line, "RESULT "); ok {
			var res result
			if err := json.Unmarshal([]byte(js), &res); err != nil {
				return nil, err
			}
			return &res, nil
		}
	}
	return nil, fmt.Errorf("rank 0 printed no result: %s", tail(outs[0].String(), 1500))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// commandLine is the first line of the table file: the command, then what the run was.
func commandLine(command string) string {
	var b strings.Builder
	b.WriteString(command)
	fmt.Fprintf(&b, "  (%s, 2 hosts x %d rank(s), MLP 784-%d-%d-10 on Fashion-MNIST, batch %dx%d, %d steps, SGD lr %g momentum 0.9, PowerSGD from step %d)",
		time.Now().UTC().Format(time.RFC3339), *perHost, *hidden, *hidden, 2**perHost, *per, *steps, *lr, *start)
	return b.String()
}

func formatTable(rows []result) string {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "rate\thook\tstep s\twire MB/step\tvs none\tspeedup\ttime to loss s\tsteps to loss\tfinal loss\ttest acc\t")
	none := map[string]result{}
	for _, r := range rows {
		if r.Hook == "none" {
			none[r.Rate] = r
		}
	}
	for _, r := range rows {
		base, ok := none[r.Rate]
		ratio, speed := "-", "-"
		if ok && base.WireBytes > 0 {
			ratio = fmt.Sprintf("%.3f", r.WireBytes/base.WireBytes)
			speed = fmt.Sprintf("%.2fx", base.StepS/r.StepS)
		}
		ttl, stl := "not reached", "-"
		if r.TimeToLoss >= 0 {
			ttl, stl = fmt.Sprintf("%.1f", r.TimeToLoss), strconv.Itoa(r.StepsToLoss)
		}
		fmt.Fprintf(w, "%s\t%s\t%.3f\t%.2f\t%s\t%s\t%s\t%s\t%.3f\t%.4f\t\n", r.Rate, r.Hook, r.StepS,
			r.WireBytes/1e6, ratio, speed, ttl, stl, r.FinalLoss, r.TestAcc)
	}
	w.Flush()
	fmt.Fprintf(&b, "\nshaping: %s. step s: median; wire MB/step: eth0 tx bytes of host 0 per step; vs none: that over the uncompressed run's;\nspeedup: uncompressed step time over this one; time/steps to loss: until the mean loss of the last 20 steps < target (%g).\n",
		shapingOf(rows), *target)
	return b.String()
}

func shapingOf(rows []result) string {
	seen := map[string]bool{}
	var s []string
	for _, r := range rows {
		if !seen[r.Shaping] {
			seen[r.Shaping] = true
			s = append(s, r.Shaping)
		}
	}
	return strings.Join(s, "; ")
}

// worker is one rank: it trains with the hook named by -hooks and rank 0 prints a RESULT line.
func worker() error {
	ctx, cancel := context.WithTimeout(context.Background(), 19*time.Minute)
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
	res, err := train(ctx, g, *hooksFlag)
	if err != nil {
		return fmt.Errorf("rank %d: %w", g.Rank(), err)
	}
	if g.Rank() == 0 {
		js, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Printf("RESULT %s\n", js)
	}
	return nil
}

func commHook(name string) (ddp.CommHook, error) {
	switch {
	case name == "none":
		return ddp.AllReduceHook(), nil
	case name == "fp16":
		return commhook.FP16Compress(), nil
	case name == "bf16":
		return commhook.BF16Compress(), nil
	case strings.HasPrefix(name, "powersgd"):
		r, err := strconv.Atoi(strings.TrimPrefix(name, "powersgd"))
		if err != nil {
			return nil, fmt.Errorf("hook %q: want powersgdR with R the rank", name)
		}
		return commhook.PowerSGD(commhook.PowerSGDRank(r), commhook.PowerSGDStartIter(*start))
	}
	return nil, fmt.Errorf("unknown hook %q", name)
}

func mlp() nn.Module {
	return &nn.Sequential{Names: []string{"fc1", "relu1", "fc2", "relu2", "fc3"}, Layers: []nn.Module{
		&nn.Linear{In: 784, Out: *hidden}, &nn.ReLU{}, &nn.Linear{In: *hidden, Out: *hidden}, &nn.ReLU{},
		&nn.Linear{In: *hidden, Out: 10}}}
}

// loadSplit reads n images of a Fashion-MNIST split, normalised, as rows of 784 floats.
func loadSplit(ctx context.Context, train bool, n int) ([]float32, []float32, error) {
	ds, err := data.FashionMNIST(*dataDir, train)
	if err != nil {
		return nil, nil, err
	}
	defer ds.Close()
	n = min(n, ds.Len())
	x, y := make([]float32, n*784), make([]float32, n)
	for i := range n {
		l, err := ds.Load(ctx, i, nil, x[i*784:(i+1)*784])
		if err != nil {
			return nil, nil, err
		}
		y[i] = float32(l)
	}
	for i, v := range x {
		x[i] = (v - data.FashionMNISTMean) / data.FashionMNISTStd
	}
	return x, y, nil
}

func train(ctx context.Context, g comm.Group, hookName string) (*result, error) {
	hook, err := commHook(hookName)
	if err != nil {
		return nil, err
	}
	xs, ys, err := loadSplit(ctx, true, *trainN)
	if err != nil {
		return nil, err
	}
	m, err := nn.NewModel(mlp(), nn.WithSeed(1))
	if err != nil {
		return nil, err
	}
	d, err := ddp.New(ctx, m, g, ddp.WithCommHook(hook))
	if err != nil {
		return nil, err
	}
	segs, err := optim.Segments(m.Params, 0)
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewSGD(segs, *lr, optim.WithMomentum(0.9))
	if err != nil {
		return nil, err
	}
	p, err := d.Compile(nn.Classify(*per, []int{784}, 0), nn.WithOptimizer(opt))
	if err != nil {
		return nil, err
	}
	n, rank := g.Size(), g.Rank()
	order := rand.New(rand.NewSource(7)).Perm(len(ys))
	x, y := make([]float32, *per*784), make([]float32, *per)
	lossBuf := make([]float64, 1)
	var losses, stepTimes []float64
	res := &result{Hook: hookName, Steps: *steps, Target: *target, TimeToLoss: -1, StepsToLoss: -1,
		GradBytes: 4 * len(m.Params.Grad)}
	warm := max(10, *start)
	var txStart int64
	t0 := time.Now()
	for s := range *steps {
		if s == warm {
			txStart = txBytes()
		}
		ts := time.Now()
		for i := range *per {
			k := order[(s*n**per+rank**per+i)%len(order)]
			copy(x[i*784:(i+1)*784], xs[k*784:(k+1)*784])
			y[i] = ys[k]
		}
		m.Params.ZeroGrad()
		if err := p.SetInput("images", x); err != nil {
			return nil, err
		}
		if err := p.SetInput("labels", y); err != nil {
			return nil, err
		}
		if err := p.RunStep(ctx); err != nil {
			return nil, fmt.Errorf("step %d: %w", s, err)
		}
		l, err := p.LossValue()
		if err != nil {
			return nil, err
		}
		lossBuf[0] = float64(l)
		if err := g.AllReduce(comm.F64(lossBuf), comm.Avg).Wait(ctx); err != nil {
			return nil, err
		}
		if s >= warm {
			stepTimes = append(stepTimes, time.Since(ts).Seconds())
		}
		losses = append(losses, lossBuf[0])
		if k := len(losses); k >= 20 && res.TimeToLoss < 0 && mean(losses[k-20:]) < *target {
			res.TimeToLoss, res.StepsToLoss = time.Since(t0).Seconds(), s+1
		}
	}
	res.TotalS = time.Since(t0).Seconds()
	if len(stepTimes) > 0 {
		res.WireBytes = float64(txBytes()-txStart) / float64(len(stepTimes))
	}
	res.StepS = benchutil.Median(stepTimes)
	res.FinalLoss = mean(losses[max(0, len(losses)-20):])
	if rank == 0 {
		tx, ty, err := loadSplit(ctx, false, 10000)
		if err != nil {
			return nil, err
		}
		res.TestAcc = accuracy(m, tx, ty)
	}
	return res, nil
}

func mean(xs []float64) float64 {
	var s float64
	for _, v := range xs {
		s += v
	}
	return s / float64(len(xs))
}

// txBytes is eth0's transmitted bytes in this network namespace (lo's on loopback runs).
func txBytes() int64 {
	for _, dev := range []string{"eth0", "lo"} {
		b, err := os.ReadFile("/sys/class/net/" + dev + "/statistics/tx_bytes")
		if err == nil {
			v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return v
		}
	}
	return 0
}

// accuracy is the fraction of the images x (rows of 784) whose largest logit is their label,
// computing the MLP's forward pass with BLAS (weights [out, in] as torch's).
func accuracy(m *nn.Model, x, y []float32) float64 {
	rows := len(y)
	h := x
	in := 784
	layers := []string{"fc1", "fc2", "fc3"}
	for li, name := range layers {
		w, b := m.Params.Param(name+".weight"), m.Params.Param(name+".bias")
		out := w.Shape[0]
		o := make([]float32, rows*out)
		for i := range rows {
			copy(o[i*out:(i+1)*out], b.Data)
		}
		blas32.Implementation().Sgemm(blas.NoTrans, blas.Trans, rows, out, in, 1, h, in, w.Data, in, 1, o, out)
		if li < len(layers)-1 {
			for i, v := range o {
				o[i] = max(v, 0)
			}
		}
		h, in = o, out
	}
	correct := 0
	for i := range rows {
		row := h[i*in : (i+1)*in]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if float32(best) == y[i] {
			correct++
		}
	}
	return float64(correct) / float64(rows)
}
