package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/scaling"
)

// bedFit is the test-bed part: the host-level model (scaling.Costs) fitted on one bench/netbed
// run and checked on another, the plain α–β model (one link per rate) on the same check for comparison, and
// the DDP runs across hosts (bench/ddpnet) predicted from the fitted constants.
type bedFit struct {
	Costs     scaling.Costs `json:"costs"` // Wire: the fraction of the shaped rate
	FitFile   string        `json:"fit_file"`
	FitMedian float64       `json:"fit_median_abs_error"`
	// The α–β model fitted per rate on the fit run's 2x2 all-reduce at 1 and 64 MiB, on the
	// check run: how many hierarchical points within 15%, of how many.
	AlphaBetaWithin, AlphaBetaPoints int
	AlphaBetaLinks                   map[string]scaling.Link
	Loaded                           bool // the model took each bed's load average
	// The check run: points within 15% and the median |relative error|.
	CheckWithin, CheckPoints int
	CheckMedian              float64
	// The fit run's measurements taken as the check run's predictions: how many within 15%.
	RepeatWithin, RepeatPoints int
}

// netbedPoints are the model's plans and measured times of a bench/netbed run, hierarchical
// and flat.
// With loaded, each point carries the load average its bed recorded.
func netbedPoints(rs netbedRows, loaded bool) ([]scaling.Point, []string, error) {
	var pts []scaling.Point
	var names []string
	for _, r := range rs {
		for _, algo := range []string{scaling.Hier, scaling.Flat} {
			sec := r.Hier
			if algo == scaling.Flat {
				sec = r.Flat
			}
			if sec <= 0 {
				continue
			}
			p, err := scaling.PlanOf(r.Op, algo, r.Hosts, r.PerHost, float64(r.Bytes))
			if err != nil {
				return nil, nil, err
			}
			pt := scaling.Point{Plan: p, Rate: rateBps(r.Rate), Seconds: sec}
			if loaded {
				pt.Load = r.Load
			}
			pts = append(pts, pt)
			names = append(names, fmt.Sprintf("netbed %dx%d %-6s %-4s %-14s %2d MiB", r.Hosts, r.PerHost, r.Rate, algo, r.Op, r.Bytes/MiB))
		}
	}
	return pts, names, nil
}

// fitBed fits the host-level constants on the fit run and adds every point of the runs to
// the rows (the fit run's as "fit", the check runs' as "check"); checkPaths is a
// comma-separated list. With loaded the model takes the load average each bed recorded
// (Costs.TimeLoaded).
func fitBed(fitPath, checkPaths string, loaded bool, shm scaling.Link, add func(point, qty string, pred, meas float64, src string)) (bedFit, error) {
	out := bedFit{FitFile: fitPath, Loaded: loaded}
	fitRows, err := readNetbed(fitPath)
	if err != nil {
		return out, err
	}
	fitPts, fitNames, err := netbedPoints(fitRows, loaded)
	if err != nil {
		return out, err
	}
	// This machine: 2 cores, one 32 MiB L3 (lscpu).
	start := scaling.Costs{Alpha: 1e-4, Wire: 0.9, TCP: 1e-9, Mem: 1e-10, Cores: 2, Serial: 0.5, Cache: 32 << 20, Spill: 0.3}
	out.Costs, out.FitMedian = scaling.FitCosts(fitPts, start)
	c := out.Costs
	if add == nil {
		add = func(string, string, float64, float64, string) {}
	}
	fmt.Printf("load average taken: %v; host-level model fitted on %s (%d points, hier and flat): α %.0f µs per ring step, wire %.0f%% of the rate, TCP %.2f ns/B (%.2f GB/s of one core), memory %.3f ns/B, %g cores, %.0f%% of the shorter of wire and CPU not hidden, CPU +%.0f%% per byte for a working set far beyond the %d MiB L3; fit median |error| %.1f%%\n",
		loaded, fitPath, len(fitPts), c.Alpha*1e6, c.Wire*100, c.TCP*1e9, 1/c.TCP/1e9, c.Mem*1e9, c.Cores, c.Serial*100, c.Spill*100, int(c.Cache)>>20, out.FitMedian*100)
	for i, p := range fitPts {
		add(fitNames[i], "latency ms", c.AtRate(p.Rate).TimeLoaded(p.Plan, p.Load)*1e3, p.Seconds*1e3, "fit: "+fitPath)
	}
	// The plain α–β model, fitted on the fit run (2x2 all-reduce, 1 and 64 MiB,
	// per rate), for comparison on the check runs' hierarchical points.
	out.AlphaBetaLinks = map[string]scaling.Link{}
	for _, rate := range []string{"1gbit", "10gbit"} {
		small, big := fitRows.find("all-reduce", 2, rate, 1*MiB), fitRows.find("all-reduce", 2, rate, 64*MiB)
		if small == nil || big == nil {
			continue
		}
		out.AlphaBetaLinks[rate] = fitLink([]int{1 * MiB, 64 * MiB}, []float64{small.Hier - shm.Ring(2, 1*MiB), big.Hier - shm.Ring(2, 64*MiB)}, 2)
	}
	var errs []float64
	for _, checkPath := range strings.Split(checkPaths, ",") {
		checkRows, err := readNetbed(checkPath)
		if err != nil {
			return out, err
		}
		checkPts, checkNames, err := netbedPoints(checkRows, loaded)
		if err != nil {
			return out, err
		}
		for i, p := range checkPts {
			pred := c.AtRate(p.Rate).TimeLoaded(p.Plan, p.Load)
			add(checkNames[i], "latency ms", pred*1e3, p.Seconds*1e3, "check: "+checkPath)
			e := math.Abs(pred/p.Seconds - 1)
			errs = append(errs, e)
			if e <= 0.15 {
				out.CheckWithin++
			}
		}
		// The noise floor: the fit run's own measurement of each point as its prediction.
		for _, r := range checkRows {
			f := fitRows.find(r.Op, r.Hosts, r.Rate, r.Bytes)
			if f == nil {
				continue
			}
			for _, pair := range [][2]float64{{f.Hier, r.Hier}, {f.Flat, r.Flat}} {
				if pair[0] > 0 && pair[1] > 0 {
					out.RepeatPoints++
					if math.Abs(pair[0]/pair[1]-1) <= 0.15 {
						out.RepeatWithin++
					}
				}
			}
		}
		for _, r := range checkRows {
			l, ok := out.AlphaBetaLinks[r.Rate]
			if !ok || r.Hier <= 0 {
				continue
			}
			t := scaling.Topology{Hosts: r.Hosts, PerHost: r.PerHost, Rails: 1, Intra: shm, Inter: l}
			pred := t.Half(float64(r.Bytes))
			if r.Op == "all-reduce" {
				pred = t.AllReduce(float64(r.Bytes))
			}
			out.AlphaBetaPoints++
			if math.Abs(pred/r.Hier-1) <= 0.15 {
				out.AlphaBetaWithin++
			}
		}
	}
	out.CheckPoints = len(errs)
	slices.Sort(errs)
	out.CheckMedian = errs[len(errs)/2]
	return out, nil
}

// ddpnetRow is one link rate of bench/ddpnet (2 hosts × 1 rank).
type ddpnetRow struct {
	Rate    string  `json:"rate"`
	Hook    string  `json:"hook"` // DDP's communication hook ("" or "none": plain all-reduce)
	Plain   float64 `json:"imgs_per_s_plain"`
	DDP     float64 `json:"imgs_per_s_ddp2"`
	Eff     float64 `json:"efficiency"`
	Ceiling float64 `json:"no_comm_ceiling"`
	StepS   float64 `json:"ddp_step_s"`
	Loads   []float64
}

func readDDPNet(path string) ([]ddpnetRow, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rs, err := benchutil.DecodeRows[ddpnetRow](b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

// predictDDPNet predicts bench/ddpnet's runs: the resnet18 profile's shape (bench/ddp's
// trace) scaled to the run's own step time of two plain processes at once (its measured
// no-communication input), each bucket's all-reduce priced by the host-level model at the
// run's rate, its CPU taken from the rank's compute (DDPCost). Efficiency is, as measured,
// one plain process's step over the DDP step.
func predictDDPNet(path string, prof scaling.Profile, cuts []int, batch int, c scaling.Costs, add func(point, qty string, pred, meas float64, src string)) ([]map[string]any, error) {
	rs, err := readDDPNet(path)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Printf("no %s: run go run ./bench/ddpnet\n", path)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, r := range rs {
		// The fp16 and bf16 hooks all-reduce 16-bit copies: half the bytes (their casts are
		// left out). PowerSGD's low-rank factors are not modelled.
		wire := 1.0
		switch r.Hook {
		case "", "none":
		case "fp16", "bf16":
			wire = 0.5
		default:
			fmt.Printf("ddpnet 2x1 %s hook %s: not modelled\n", r.Rate, r.Hook)
			continue
		}
		plainStep := float64(batch) / r.Plain
		twoPlainStep := plainStep / r.Ceiling // two processes sharing the machine, no communication
		p := scaleProfile(prof, twoPlainStep/prof.Compute())
		cr := c.AtRate(rateBps(r.Rate))
		cost := func(b float64) (float64, float64) {
			pl, _ := scaling.PlanOf("all-reduce", scaling.Hier, 2, 1, b*wire)
			return cr.Time(pl), cr.CPU(pl) / 2
		}
		s, err := scaling.DDPCost(p, cuts, cost)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("ddpnet 2x1 %s resnet18 DDP", r.Rate)
		if wire != 1 {
			name += " " + r.Hook
		}
		add(name, "step ms", s.Time*1e3, r.StepS*1e3, "check: "+path)
		add(name, "efficiency", plainStep/s.Time, r.Eff, "check: "+path)
		out = append(out, map[string]any{"rate": r.Rate, "hook": r.Hook, "predicted_step_s": s.Time, "measured_step_s": r.StepS,
			"predicted_efficiency": plainStep / s.Time, "measured_efficiency": r.Eff, "loads": r.Loads})
	}
	return out, nil
}

func scaleProfile(p scaling.Profile, f float64) scaling.Profile {
	q := p
	q.Forward, q.Optimizer = p.Forward*f, p.Optimizer*f
	q.Layers = append([]scaling.Layer(nil), p.Layers...)
	for i := range q.Layers {
		q.Layers[i].Backward *= f
	}
	return q
}
