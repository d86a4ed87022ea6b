package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/scaling"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/models/swin"
)

// trace is rank 0's part of a DDP timeline (Chrome trace from timeline.Timeline).
type trace struct {
	steps                        int
	forward, optimizer, stepMean float64
	arrive                       map[string]float64 // mean seconds from backward start
	order                        []string           // gradient names, first arrival first
	arMean                       []float64          // mean all-reduce seconds per bucket
	bucketNote                   string
}

func readTrace(path string) (*trace, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Events []struct {
			Name string         `json:"name"`
			Ts   float64        `json:"ts"`
			Dur  float64        `json:"dur"`
			Pid  int            `json:"pid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t := &trace{arrive: map[string]float64{}}
	bwdStart, fwdStart := map[float64]float64{}, map[float64]float64{}
	arSum, arN := map[int]float64{}, map[int]int{}
	for _, e := range f.Events {
		if e.Pid != 0 {
			continue
		}
		step, _ := e.Args["step"].(float64)
		switch {
		case e.Name == "backward":
			bwdStart[step] = e.Ts
		case e.Name == "forward":
			fwdStart[step] = e.Ts
			t.forward += e.Dur
			t.steps++
		case e.Name == "optimizer":
			t.optimizer += e.Dur
		case strings.HasPrefix(e.Name, "all-reduce bucket"):
			bk := int(e.Args["bucket"].(float64))
			arSum[bk] += e.Dur
			arN[bk]++
		}
	}
	for _, e := range f.Events {
		if e.Pid != 0 || !strings.HasPrefix(e.Name, "grad ") {
			continue
		}
		step, _ := e.Args["step"].(float64)
		name := strings.TrimPrefix(e.Name, "grad ")
		if _, ok := t.arrive[name]; !ok {
			t.order = append(t.order, name)
		}
		t.arrive[name] += (e.Ts - bwdStart[step]) / 1e6
	}
	if t.steps == 0 {
		return nil, fmt.Errorf("%s: no forward events of rank 0", path)
	}
	n := float64(t.steps)
	t.forward, t.optimizer = t.forward/n/1e6, t.optimizer/n/1e6
	for k := range t.arrive {
		t.arrive[k] /= n
	}
	for i := 0; i < len(arN); i++ {
		t.arMean = append(t.arMean, arSum[i]/float64(arN[i])/1e6)
	}
	// Step time: forward start to the next step's forward start.
	var sum float64
	var k int
	for s, ts := range fwdStart {
		if nx, ok := fwdStart[s+1]; ok {
			sum += (nx - ts) / 1e6
			k++
		}
	}
	if k > 0 {
		t.stepMean = sum / float64(k)
	}
	t.bucketNote = "1.96, 27.52, 13.67, 1.45 MiB (bench/results/ddp.json bucket_sizes)"
	return t, nil
}

// profile is the per-gradient backward profile: each gradient's backward time is the gap
// between its mean arrival and the previous one's; bytes come from the layer shapes.
func (t *trace) profile(ls []archLayer) (scaling.Profile, error) {
	numel := map[string]int{}
	for _, l := range ls {
		numel[l.name] = l.numel
	}
	p := scaling.Profile{Forward: t.forward, Optimizer: t.optimizer}
	prev := 0.0
	for _, name := range t.order {
		n, ok := numel[name]
		if !ok {
			return p, fmt.Errorf("trace gradient %q is not a resnet18 parameter", name)
		}
		p.Layers = append(p.Layers, scaling.Layer{Name: name, Backward: max(t.arrive[name]-prev, 0), Bytes: 4 * n})
		prev = max(prev, t.arrive[name])
	}
	return p, nil
}

type netbedRow struct {
	Op      string  `json:"op"`
	Hosts   int     `json:"hosts"`
	PerHost int     `json:"ranks_per_host"`
	Rate    string  `json:"rate"`
	Bytes   int     `json:"bytes"`
	Hier    float64 `json:"hier_latency_s"`
	Flat    float64 `json:"flat_latency_s"`
	Load    float64 `json:"loadavg"`
}

type netbedRows []netbedRow

func (rs netbedRows) find(op string, hosts int, rate string, bytes int) *netbedRow {
	for i, r := range rs {
		if r.Op == op && r.Hosts == hosts && r.Rate == rate && r.Bytes == bytes {
			return &rs[i]
		}
	}
	return nil
}

func readNetbed(path string) (netbedRows, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rs, err := benchutil.DecodeRows[netbedRow](b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

type pub struct {
	name, assume, computeNote string
	published                 float64
	prof                      scaling.Profile
	top                       scaling.Topology
	cuts                      []int
	first, cap, last          int
}

// published builds the two public points from layer shapes and published throughput.
func published() ([]pub, error) {
	var out []pub
	// Swin-L, 4 nodes x 8 A100, PyTorch DDP (89%).
	sc, err := swin.Arch("swin_l", 0)
	if err != nil {
		return nil, err
	}
	sl := swinLayers(sc, 224)
	params, flops := totals(sl)
	const swinBatch = 32
	// Swin paper Table 1: Swin-L 224², 34.5 GFLOPs, 141.0 img/s inference on V100. Training
	// ≈ 3x inference FLOPs; A100 ≈ 2x V100 with AMP (assumed).
	swinRate := 141.0 * 2 / 3
	sp := flopsProfile(sl, swinBatch/swinRate)
	for _, rails := range []int{8, 1} {
		top := scaling.Topology{Hosts: 4, PerHost: 8, Rails: rails,
			Intra: scaling.Link{Alpha: 5e-6, Beta: 300e9}, Inter: scaling.Link{Alpha: 5e-6, Beta: 200e9 / 8}}
		out = append(out, pub{
			name:        fmt.Sprintf("PyTorch DDP, Swin-L 224², 4 nodes x 8 A100, %d HDR NIC(s) per node (published 89%%)", rails),
			assume:      fmt.Sprintf("NVLink3 300 GB/s per direction, α 5 µs; HDR InfiniBand 200 Gbit/s (25 GB/s) per NIC, α 5 µs; %d NIC(s) per node; fp32 gradients; DDP buckets 1/25/1 MiB; batch %d per GPU; optimizer not modelled", rails, swinBatch),
			computeNote: fmt.Sprintf("%.1f M params, %.1f GFLOPs forward per image from the layer shapes; %.0f img/s per A100 = Swin paper's 141.0 img/s V100 inference x 2 (A100/V100, assumed) / 3 (training); %.0f ms per step", float64(params)/1e6, flops/1e9, swinRate, swinBatch/swinRate*1e3),
			published:   0.89, prof: sp, top: top, cuts: scaling.Buckets(sp.Layers, MiB, 25*MiB, MiB), first: MiB, cap: 25 * MiB, last: MiB,
		})
	}
	// ResNet-101, 128 servers x 4 Pascal GPUs, 25 Gbit/s RoCE, Horovod (90%).
	r101, _ := resnet.Arch("resnet101", 0)
	r50, _ := resnet.Arch("resnet50", 0)
	rl := resnetLayers(r101, 224)
	params, flops = totals(rl)
	_, f50 := totals(resnetLayers(r50, 224))
	const rBatch = 64
	// TensorFlow benchmarks page: ResNet-50 219 img/s on one P100 (DGX-1, batch 64, synthetic),
	// scaled to ResNet-101 by the FLOPs ratio.
	rRate := 219 * f50 / flops
	rp := flopsProfile(rl, rBatch/rRate)
	top := scaling.Topology{Hosts: 128, PerHost: 4, Rails: 1,
		Intra: scaling.Link{Alpha: 10e-6, Beta: 10e9}, Inter: scaling.Link{Alpha: 10e-6, Beta: 25e9 / 8}}
	out = append(out, pub{
		name:        "Horovod, ResNet-101 224², 128 servers x 4 Pascal GPUs, 25 Gbit/s RoCE (published 90%)",
		assume:      "PCIe 3 x16 inside a server, 10 GB/s, α 10 µs; one 25 Gbit/s RoCE NIC per server (3.125 GB/s), α 10 µs; fp32 gradients; Horovod's 64 MiB tensor fusion as buckets (no 1 MiB first/last bucket); batch 64 per GPU; optimizer not modelled",
		computeNote: fmt.Sprintf("%.1f M params, %.2f GFLOPs forward per image (ResNet-50 %.2f); %.0f img/s per P100 = TensorFlow benchmarks' 219 img/s ResNet-50 on P100 x FLOPs ratio; %.0f ms per step", float64(params)/1e6, flops/1e9, f50/1e9, rRate, rBatch/rRate*1e3),
		published:   0.90, prof: rp, top: top, cuts: scaling.Buckets(rp.Layers, 64*MiB, 64*MiB, 0), first: 64 * MiB, cap: 64 * MiB, last: 0,
	})
	return out, nil
}

type sens struct {
	Input       string  `json:"input"`
	Minus, Plus float64 `json:"-"`
	MinusEff    float64 `json:"efficiency_minus_20pct"`
	PlusEff     float64 `json:"efficiency_plus_20pct"`
}

// sensitivity is the DDP efficiency with each input at 0.8x and 1.2x.
func sensitivity(p scaling.Profile, t scaling.Topology, cuts []int, first, capB, last int) []sens {
	eff := func(p scaling.Profile, t scaling.Topology, cuts []int) float64 {
		s, _ := scaling.DDP(p, t, cuts)
		return s.Efficiency
	}
	scaleCompute := func(f float64) scaling.Profile {
		q := p
		q.Forward, q.Optimizer = p.Forward*f, p.Optimizer*f
		q.Layers = append([]scaling.Layer(nil), p.Layers...)
		for i := range q.Layers {
			q.Layers[i].Backward *= f
		}
		return q
	}
	var out []sens
	one := func(name string, f func(x float64) float64) {
		s := sens{Input: name, Minus: f(0.8), Plus: f(1.2)}
		s.MinusEff, s.PlusEff = s.Minus, s.Plus
		out = append(out, s)
	}
	one("compute time", func(x float64) float64 { return eff(scaleCompute(x), t, cuts) })
	one("inter-host β", func(x float64) float64 { u := t; u.Inter.Beta *= x; return eff(p, u, cuts) })
	one("inter-host α", func(x float64) float64 { u := t; u.Inter.Alpha *= x; return eff(p, u, cuts) })
	one("intra-host β", func(x float64) float64 { u := t; u.Intra.Beta *= x; return eff(p, u, cuts) })
	one("intra-host α", func(x float64) float64 { u := t; u.Intra.Alpha *= x; return eff(p, u, cuts) })
	one("bucket cap", func(x float64) float64 {
		return eff(p, t, scaling.Buckets(p.Layers, first, int(float64(capB)*x), last))
	})
	return out
}
