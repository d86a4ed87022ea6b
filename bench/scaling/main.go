// Command scaling predicts DDP and ZeRO-3 step time and efficiency with internal/scaling and
// prints them against what this repository measured (bench/results/ddp.json and ddp_trace.json
// from bench/ddp, netbed.json from bench/netbed, comm.json from bench/comm) and against two
// published results. It measures nothing itself; it writes bench/results/scaling.json.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/netbed"
	"github.com/gorgonia-parallel/gp/internal/scaling"
	"github.com/gorgonia-parallel/gp/models/resnet"
)

const MiB = 1 << 20

var (
	fitFile, checkFile *string
	loaded             *bool
)

type row struct {
	Point     string  `json:"point"`
	Quantity  string  `json:"quantity"`
	Predicted float64 `json:"predicted"`
	Measured  float64 `json:"measured"`
	ErrorPct  float64 `json:"error_pct"`
	Source    string  `json:"source"`
}

func main() {
	dir := flag.String("results", "bench/results", "folder with the measured JSON files; scaling.json is written there")
	loaded = flag.Bool("load", false, "the host-level model takes each bed's recorded load average (the share of the 2 cores the ranks get; with the load average read before each bed it predicts worse)")
	checkFile = flag.String("check", "", "bench/netbed runs the host-level model is checked on, comma-separated (default: netbed-check.json and netbed.json in -results)")
	fitFile = flag.String("fit", "", "bench/netbed run the host-level model is fitted on (default: netbed-fit.json in -results)")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "scaling:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	prov := benchutil.Start("scaling", os.Args[1:])
	var rows []row
	add := func(point, qty string, pred, meas float64, src string) {
		rows = append(rows, row{point, qty, pred, meas, 100 * (pred - meas) / meas, src})
	}

	// Shared memory link from bench/comm, world-2 all-reduce through the staging path.
	shm, err := shmLink(filepath.Join(dir, "comm.json"))
	if err != nil {
		return err
	}
	fmt.Printf("shm link (bench/comm world 2): α %.1f µs (half the 4 KiB latency), β %.2f GB/s (median busbw ≥ 1 MiB)\n", shm.Alpha*1e6, shm.Beta/1e9)

	// 1. bench/ddp, one host, world 2: the profile from the DDP timeline of rank 0.
	tr, err := readTrace(filepath.Join(dir, "ddp_trace.json"))
	if err != nil {
		return err
	}
	rc, _ := resnet.Arch("resnet18", 0)
	prof, err := tr.profile(resnetLayers(rc, 64))
	if err != nil {
		return err
	}
	cuts := scaling.Buckets(prof.Layers, 1*MiB, 25*MiB, 1*MiB)
	fmt.Printf("resnet18 64x64 batch 16 profile (EvGradient instants, rank 0, mean of %d steps): forward %.1f ms, backward %.1f ms, optimizer %.1f ms, %d gradients\n",
		tr.steps, prof.Forward*1e3, (prof.Compute()-prof.Forward-prof.Optimizer)*1e3, prof.Optimizer*1e3, len(prof.Layers))
	fmt.Printf("bucket layout (ddp's rule, bucketcut.BySize): %s MiB; measured %s\n", mibList(scaling.BucketBytes(prof.Layers, cuts)), tr.bucketNote)
	one := scaling.Topology{Hosts: 1, PerHost: 2, Rails: 1, Intra: shm}
	ddpRes, err := readJSON(filepath.Join(dir, "ddp.json"))
	if err != nil {
		return err
	}
	ceiling, effMeas := num(ddpRes, "no_comm_ceiling"), num(ddpRes, "efficiency")
	for i, b := range scaling.BucketBytes(prof.Layers, cuts) {
		if i < len(tr.arMean) {
			add(fmt.Sprintf("bench/ddp 1x2 shm, bucket %d (%.2f MiB)", i, float64(b)/MiB), "all-reduce ms", one.AllReduce(float64(b))*1e3, tr.arMean[i]*1e3, "ddp_trace.json")
		}
	}
	s, _ := scaling.DDP(prof, one, cuts)
	add("bench/ddp 1x2 shm, β from bench/comm", "step ms", s.Time*1e3, tr.stepMean*1e3, "ddp_trace.json")
	add("bench/ddp 1x2 shm, β from bench/comm", "efficiency", ceiling*s.Efficiency, effMeas, "ddp.json (median of 3; prediction × measured no-comm ceiling)")
	// The same with β under contention: fitted to the trace's own all-reduce durations.
	busy := one
	busy.Intra = fitLink(scaling.BucketBytes(prof.Layers, cuts), tr.arMean, 2)
	s2, _ := scaling.DDP(prof, busy, cuts)
	fmt.Printf("shm link fitted to the trace's bucket all-reduces (2 cores shared with backward): α %.0f µs, β %.2f GB/s\n", busy.Intra.Alpha*1e6, busy.Intra.Beta/1e9)
	add("bench/ddp 1x2 shm, β from the trace", "step ms", s2.Time*1e3, tr.stepMean*1e3, "ddp_trace.json")
	add("bench/ddp 1x2 shm, β from the trace", "efficiency", ceiling*s2.Efficiency, effMeas, "ddp.json")

	// 2. The test bed: the host-level model fitted on one bench/netbed run, checked on
	// another; the DDP runs across hosts (bench/ddpnet) predicted from it.
	check := *checkFile
	if check == "" {
		check = filepath.Join(dir, "netbed-check.json") + "," + filepath.Join(dir, "netbed.json")
	}
	if *fitFile == "" {
		*fitFile = filepath.Join(dir, "netbed-fit.json")
	}
	other, err := fitBed(*fitFile, check, !*loaded, shm, nil)
	if err != nil {
		return err
	}
	fmt.Printf("  (shown for comparison, not used below: %d of %d check points within 15%%, median |error| %.1f%%)\n", other.CheckWithin, other.CheckPoints, 100*other.CheckMedian)
	bed, err := fitBed(*fitFile, check, *loaded, shm, add)
	if err != nil {
		return err
	}
	fmt.Printf("noise floor: the fit run's own measurements as predictions of the check runs: %d of %d within 15%%\n", bed.RepeatWithin, bed.RepeatPoints)
	fmt.Printf("plain α–β model (inter-host link fitted per rate on the fit run's 2x2 all-reduce at 1 and 64 MiB) on the check runs: %d of %d hierarchical points within 15%%\n",
		bed.AlphaBetaWithin, bed.AlphaBetaPoints)
	ddpnet, err := predictDDPNet(filepath.Join(dir, "ddpnet.json"), prof, cuts, 16, bed.Costs, add)
	if err != nil {
		return err
	}
	var bedPred []map[string]any
	for _, h := range []int{2, 3} {
		for _, rate := range []string{"1gbit", "10gbit"} {
			c := bed.Costs.AtRate(rateBps(rate))
			d, _ := scaling.DDPCost(prof, cuts, func(b float64) (float64, float64) {
				pl, _ := scaling.PlanOf("all-reduce", scaling.Hier, h, 2, b)
				return c.Time(pl), c.CPU(pl) / float64(2*h)
			})
			fmt.Printf("prediction, not measured: netbed %dx2 %s resnet18 DDP (hier): step %.0f ms, efficiency %.3f\n", h, rate, d.Time*1e3, d.Efficiency)
			bedPred = append(bedPred, map[string]any{"hosts": h, "per_host": 2, "rate": rate, "ddp_step_s": d.Time, "ddp_efficiency": d.Efficiency})
		}
	}

	printRows(rows)

	// 3. Published points.
	pubs, err := published()
	if err != nil {
		return err
	}
	var pubOut []map[string]any
	for _, p := range pubs {
		d, _ := scaling.DDP(p.prof, p.top, p.cuts)
		z, _ := scaling.ZeRO3(p.prof, p.top)
		fmt.Printf("\n%s\n  assumptions: %s\n  compute: %s\n  predicted DDP efficiency %.3f (step %.1f ms, compute %.1f ms, link busy %.1f ms) against published %.2f; ZeRO-3 %.3f\n",
			p.name, p.assume, p.computeNote, d.Efficiency, d.Time*1e3, d.Compute*1e3, d.Comm*1e3, p.published, z.Efficiency)
		// Contention, at its worst: every second the link works during backward delays
		// backward by as much (NCCL kernels taking the SMs; on CPUs, the copies taking the cores).
		full, _ := scaling.DDPCost(p.prof, p.cuts, func(b float64) (float64, float64) { t := p.top.AllReduce(b); return t, t })
		fmt.Printf("  with full compute/communication contention: %.3f\n", full.Efficiency)
		sens := sensitivity(p.prof, p.top, p.cuts, p.first, p.cap, p.last)
		fmt.Printf("  sensitivity (efficiency at −20%% / +20%% of each input):\n")
		for _, s := range sens {
			fmt.Printf("    %-28s %.3f / %.3f (Δ %+.3f / %+.3f)\n", s.Input, s.Minus, s.Plus, s.Minus-d.Efficiency, s.Plus-d.Efficiency)
		}
		pubOut = append(pubOut, map[string]any{"point": p.name, "assumptions": p.assume, "compute": p.computeNote, "published_efficiency": p.published,
			"predicted_ddp_efficiency": d.Efficiency, "predicted_step_s": d.Time, "compute_s": d.Compute, "link_busy_s": d.Comm, "predicted_zero3_efficiency": z.Efficiency, "sensitivity": sens, "full_contention_efficiency": full.Efficiency})
	}
	sens := sensitivity(prof, busy, cuts, 1*MiB, 25*MiB, 1*MiB)
	fmt.Printf("\nsensitivity, bench/ddp 1x2 (β from the trace), efficiency before the ceiling factor %.3f:\n", s2.Efficiency)
	for _, s := range sens {
		fmt.Printf("    %-28s %.3f / %.3f\n", s.Input, s.Minus, s.Plus)
	}

	// Summaries: the check run of the test bed is the test; the fit run is shown to say how
	// well the model can fit at all; the one-host bench/ddp points are apart.
	groups := []struct{ name, prefix string }{{"test bed, check runs (not fitted)", "check:"}, {"test bed, fit run", "fit:"}, {"bench/ddp one host", ""}}
	summary := map[string]any{}
	var abs []float64
	within := 0
	for _, gr := range groups {
		var es []float64
		for _, r := range rows {
			isBed := strings.HasPrefix(r.Source, "check:") || strings.HasPrefix(r.Source, "fit:")
			if (gr.prefix == "" && !isBed) || (gr.prefix != "" && strings.HasPrefix(r.Source, gr.prefix)) {
				es = append(es, math.Abs(r.ErrorPct))
			}
		}
		if len(es) == 0 {
			continue
		}
		sort.Float64s(es)
		in := 0
		for _, e := range es {
			if e <= 15 {
				in++
			}
		}
		if gr.prefix == "check:" {
			abs, within = es, in
		}
		fmt.Printf("%s: %d of %d predicted-vs-measured points within 15%%; median |error| %.1f%%\n", gr.name, in, len(es), es[len(es)/2])
		summary[gr.name] = map[string]any{"within_15pct": in, "points": len(es), "median_abs_error_pct": es[len(es)/2]}
	}
	if len(abs) == 0 {
		return fmt.Errorf("no check points")
	}
	out := map[string]any{"rows": rows, "summary": summary, "check_within_15pct": within, "check_points": len(abs), "check_median_abs_error_pct": abs[len(abs)/2],
		"shm_link": shm, "bed_model": bed, "netbed_ddp_measured": ddpnet, "trace_link": busy.Intra, "published": pubOut, "netbed_ddp_predictions": bedPred,
		"profile": "resnet18 64x64 batch 16, rank 0 of bench/ddp's world-2 timeline (EvGradient instants)", "bucket_bytes": scaling.BucketBytes(prof.Layers, cuts),
		"unit": "rows: predicted and measured in the unit their quantity names (ms, or a fraction for efficiency); error_pct in percent of the measured value",
		"units": map[string]string{
			"shm_link":     "Alpha: seconds per message; Beta: bytes per second (so are trace_link and bed_model's AlphaBetaLinks)",
			"bed_model":    "costs as internal/scaling.Costs documents them: Alpha seconds per ring step, Wire the fraction of the shaped rate a link carries, TCP and Mem CPU seconds per byte, Cache bytes, Serial and Spill fractions; fit_median_abs_error and CheckMedian fractions",
			"efficiency":   "fraction: scaling efficiency, the throughput of N workers over N times one worker's (every *_efficiency)",
			"_s":           "seconds (every key ending in _s)",
			"bucket_bytes": "bytes of each gradient bucket, in launch order",
		}}
	prov.Set(out)
	return prov.Save(os.Stdout, filepath.Join(dir, "scaling.json"), out)
}

func printRows(rows []row) {
	fmt.Printf("\n%-50s %-14s %10s %10s %8s\n", "point", "quantity", "predicted", "measured", "error")
	for _, r := range rows {
		fmt.Printf("%-50s %-14s %10.3f %10.3f %+7.1f%%\n", r.Point, r.Quantity, r.Predicted, r.Measured, r.ErrorPct)
	}
}

func mibList(bs []int) string {
	var s []string
	for _, b := range bs {
		s = append(s, fmt.Sprintf("%.2f", float64(b)/MiB))
	}
	return strings.Join(s, ", ")
}

// fitLink is the least-squares α–β link whose ring all-reduce over n ranks fits times[i]
// for bytes[i].
func fitLink(bytes []int, times []float64, n int) scaling.Link {
	// t = a·x + c with x = 2(n−1)/n·b, a = 1/β, c = 2(n−1)α.
	var sx, sy, sxx, sxy float64
	k := float64(len(bytes))
	for i, b := range bytes {
		x := 2 * float64(n-1) / float64(n) * float64(b)
		sx, sy, sxx, sxy = sx+x, sy+times[i], sxx+x*x, sxy+x*times[i]
	}
	a := (k*sxy - sx*sy) / (k*sxx - sx*sx)
	c := (sy - a*sx) / k
	return scaling.Link{Alpha: max(c, 0) / (2 * float64(n-1)), Beta: 1 / a}
}

// rateBps is a tc rate ("1gbit", "100mbit") in bytes per second; 0 when it does not parse
// (the model then has no wire limit, and the row's error shows it).
func rateBps(r string) float64 {
	b, err := netbed.RateBits(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scaling:", err)
	}
	return float64(b) / 8
}

func num(m map[string]any, k string) float64 { f, _ := m[k].(float64); return f }

func readJSON(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

func shmLink(path string) (scaling.Link, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return scaling.Link{}, err
	}
	rs, err := benchutil.DecodeRows[struct {
		Op        string  `json:"op"`
		World     int     `json:"world"`
		Bytes     int     `json:"bytes"`
		Transport string  `json:"transport"`
		Bus       float64 `json:"busbw_gbps"`
		Lat       float64 `json:"latency_s"`
	}](b)
	if err != nil {
		return scaling.Link{}, fmt.Errorf("%s: %w", path, err)
	}
	var l scaling.Link
	var bws []float64
	for _, r := range rs {
		if r.Op != "all-reduce" || r.World != 2 || r.Transport != "shm" {
			continue
		}
		if l.Alpha == 0 || r.Bytes <= 4096 {
			l.Alpha = r.Lat / 2
		}
		if r.Bytes >= MiB {
			bws = append(bws, r.Bus*1e9)
		}
	}
	if len(bws) == 0 {
		return l, fmt.Errorf("%s: no world-2 shm all-reduce ≥ 1 MiB", path)
	}
	slices.Sort(bws)
	l.Beta = bws[len(bws)/2]
	return l, nil
}
