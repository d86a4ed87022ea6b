package trainer

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestMetricsLogAndPlot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.jsonl")
	m, err := OpenMetrics(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	for s := int64(1); s <= 20; s++ {
		if err := m.Add(Record{Kind: "train", Step: s, Loss: 3 / float64(s), LR: 0.1}); err != nil {
			t.Fatal(err)
		}
		if s%5 == 0 {
			if err := m.Add(Record{Kind: "val", Step: s, Loss: 2 / float64(s), Top1: float64(4 * s), Top5: float64(5 * s)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := m.Plot(filepath.Join(dir, "curves.png")); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "curves.png"))
	if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("plot is not a PNG (%d bytes, %v)", len(b), err)
	}
	// Reopening after the last step keeps every record.
	m2, err := OpenMetrics(path, 20)
	if err != nil {
		t.Fatal(err)
	}
	m2.Close()
	if got := readRecords(t, path); len(got) != 24 {
		t.Fatalf("read back %d records, want 24", len(got))
	}
}

// A run resumed from the checkpoint of step 12, after an attempt that logged up to step 20
// and was killed while writing a line, drops steps 13..20 and the torn line, and logs each
// step once.
func TestMetricsResumeDropsRedoneSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	m, err := OpenMetrics(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	add := func(m *Metrics, from, to int64) {
		for s := from; s <= to; s++ {
			if err := m.Add(Record{Kind: "train", Step: s, StepLoss: float64(s)}); err != nil {
				t.Fatal(err)
			}
			if s%6 == 0 {
				if err := m.Add(Record{Kind: "val", Step: s, Loss: 1}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	add(m, 1, 20)
	if _, err := m.w.WriteString(`{"kind":"train","step":21,"lo`); err != nil {
		t.Fatal(err)
	}
	m.Close()

	m, err = OpenMetrics(path, 12)
	if err != nil {
		t.Fatal(err)
	}
	if got := readRecords(t, path); len(got) != 12+2 || got[len(got)-1].Step != 12 || got[len(got)-1].Kind != "val" {
		t.Fatalf("after resuming at step 12 the log holds %d records ending with %+v; want 14 ending with step 12's validation", len(got), got[len(got)-1])
	}
	add(m, 13, 24)
	m.Close()
	type key struct {
		kind string
		step int64
	}
	seen := map[key]bool{}
	recs := readRecords(t, path)
	for i, r := range recs {
		key := key{r.Kind, r.Step}
		if seen[key] {
			t.Fatalf("record %d: %s step %d logged twice", i, r.Kind, r.Step)
		}
		seen[key] = true
	}
	if len(recs) != 24+4 {
		t.Fatalf("%d records, want 28", len(recs))
	}
}

// The plot's series stay within PlotPoints points and each point is the mean of the inputs
// it stands for.
func TestDecimatedSeriesIsBounded(t *testing.T) {
	for _, n := range []int{1, PlotPoints - 1, PlotPoints, 3*PlotPoints + 7, 450_000} {
		var d decimated
		for i := 1; i <= n; i++ {
			d.add(float64(i), 2*float64(i))
		}
		pts := d.points()
		if len(pts) > PlotPoints+1 || len(pts) == 0 {
			t.Fatalf("%d inputs: %d points, want 1..%d", n, len(pts), PlotPoints+1)
		}
		for _, p := range pts {
			if p.Y != 2*p.X {
				t.Fatalf("%d inputs: point %+v is not a mean of consecutive inputs", n, p)
			}
		}
		if last := pts[len(pts)-1]; last.X > float64(n) || last.X < float64(n)-float64(n)/float64(len(pts))*2 {
			t.Fatalf("%d inputs: last point at x=%g", n, last.X)
		}
	}
}

// readRecords parses every line of a metrics log.
func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: line %d: %v", path, len(out)+1, err)
		}
		out = append(out, r)
	}
	return out
}

// Result.LossHistory holds at most 2*LossHistorySteps values while a run appends to it.
func TestKeepLastIsBounded(t *testing.T) {
	const n = 4
	var h []float64
	for i := 1; i <= 1000; i++ {
		h = keepLast(append(h, float64(i)), n)
		if len(h) >= 2*n || cap(h) > 4*n {
			t.Fatalf("after %d values: len %d cap %d, want len < %d", i, len(h), cap(h), 2*n)
		}
		if h[len(h)-1] != float64(i) || (len(h) >= n && h[len(h)-n] != float64(i-n+1)) {
			t.Fatalf("after %d values: %v does not end with the last %d", i, h, n)
		}
	}
}

// Whatever values a run logs (a loss of 0, a negative or non-finite loss, a learning rate
// of 0 or Inf, one record, none), the log keeps them and the plot is a PNG or an error,
// never a panic; a non-finite value reads back as itself.
func TestPlotOfAnyValues(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, tc := range []struct {
		name string
		recs []Record
	}{
		{"no records", nil},
		{"only a validation", []Record{{Kind: "val", Step: 2, Loss: 1, Top1: 10, Top5: 50}}},
		{"one step", []Record{{Kind: "train", Step: 1, Loss: 2.3, LR: 0.1}}},
		{"zero loss", []Record{{Kind: "train", Step: 1, Loss: 0, LR: 0.1}, {Kind: "train", Step: 2, Loss: 0, LR: 0}}},
		{"negative loss", []Record{{Kind: "train", Step: 1, Loss: -1, LR: 0.1}, {Kind: "val", Step: 1, Loss: -2}}},
		{"NaN loss", []Record{{Kind: "train", Step: 1, Loss: nan, StepLoss: nan, LR: 0.1}, {Kind: "val", Step: 1, Loss: nan, Top1: 10}}},
		{"Inf loss and lr", []Record{{Kind: "train", Step: 1, Loss: inf, StepLoss: -inf, LR: inf}, {Kind: "train", Step: 2, Loss: 1, LR: 0}}},
		{"zero learning rate", []Record{{Kind: "train", Step: 1, Loss: 2, LR: 0}, {Kind: "train", Step: 2, Loss: 1.5, LR: 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "metrics.jsonl")
			m, err := OpenMetrics(path, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, r := range tc.recs {
				if err := m.Add(r); err != nil {
					t.Fatalf("Add(%+v): %v", r, err)
				}
			}
			if err := m.Plot(filepath.Join(dir, "curves.png")); err != nil {
				t.Fatalf("Plot: %v", err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "curves.png"))
			if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
				t.Fatalf("plot is not a PNG (%d bytes, %v)", len(b), err)
			}
			got := readRecords(t, path)
			if len(got) != len(tc.recs) {
				t.Fatalf("read back %d records, want %d", len(got), len(tc.recs))
			}
			for i, r := range tc.recs {
				same := func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }
				if g := got[i]; !same(g.Loss, r.Loss) || !same(g.StepLoss, r.StepLoss) || !same(g.LR, r.LR) || g.Step != r.Step {
					t.Errorf("record %d read back as %+v, want %+v", i, g, r)
				}
			}
		})
	}
}
