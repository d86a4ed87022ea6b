package trainer

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// FuzzMetricsLog checks that a metrics log left by anyone (a killed run, an edit, another
// program) never panics a resuming run: OpenMetrics keeps the log's leading whole records
// of steps up to from, byte for byte, and drops the rest; the run then appends, and Plot
// draws the curves or returns an error, never a panic.
func FuzzMetricsLog(f *testing.F) {
	var seed bytes.Buffer
	for _, r := range []Record{
		{Kind: "train", Epoch: 0, Step: 10, Loss: 2.3, LR: 0.1, ElapsedS: 1},
		{Kind: "val", Epoch: 0, Step: 20, Loss: math.NaN(), Top1: 11, Top5: 50, ElapsedS: 2},
		{Kind: "train", Epoch: 1, Step: 30, Loss: math.Inf(1), LR: 0.05, ElapsedS: 3},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		seed.Write(append(b, '\n'))
	}
	f.Add(seed.Bytes(), int64(20))
	f.Add(seed.Bytes()[:seed.Len()-7], int64(100)) // a torn last line
	f.Add([]byte("{\"kind\":\"train\",\"step\":1,\"loss\":0}\n{\"kind\":\"val\",\"step\":2,\"loss\":-1,\"top1\":\"+Inf\"}\n"), int64(5))
	f.Add([]byte("not json\n"), int64(0))
	f.Fuzz(func(t *testing.T, log []byte, from int64) {
		dir := t.TempDir()
		path := filepath.Join(dir, "metrics.jsonl")
		if err := os.WriteFile(path, log, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := OpenMetrics(path, from)
		if err != nil {
			t.Fatalf("OpenMetrics of a readable file: %v", err)
		}
		defer m.Close()
		kept, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(log, kept) {
			t.Fatalf("kept %q, not a prefix of the log", kept)
		}
		for _, line := range bytes.SplitAfter(kept, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var r Record
			if line[len(line)-1] != '\n' || json.Unmarshal(line, &r) != nil || r.Step > from {
				t.Fatalf("kept line %q: not a whole record of a step up to %d", line, from)
			}
		}
		if err := m.Add(Record{Kind: "train", Step: from + 1, Loss: 1, LR: 0.1}); err != nil {
			t.Fatal(err)
		}
		if err := m.Plot(filepath.Join(dir, "curves.png")); err != nil {
			t.Logf("plot: %v", err) // allowed: an error, not a panic
		}
	})
}
