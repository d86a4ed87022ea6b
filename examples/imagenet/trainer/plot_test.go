package trainer

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMetricsLogAndPlot(t *testing.T) {
	dir := t.TempDir()
	m, err := OpenMetrics(filepath.Join(dir, "metrics.jsonl"))
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
	// Reopening reads the log back, as a resumed run does.
	m2, err := OpenMetrics(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if len(m2.records) != 24 {
		t.Fatalf("read back %d records, want 24", len(m2.records))
	}
	b, err := os.ReadFile(filepath.Join(dir, "curves.png"))
	if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("plot is not a PNG (%d bytes, %v)", len(b), err)
	}
}
