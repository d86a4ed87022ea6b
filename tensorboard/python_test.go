package tensorboard_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/tensorboard"
)

// TestWriterPythonProtobuf reads a written file with Google's protobuf library
// (testdata/read_events.py: Debian's python3-protobuf, with the Event and Summary descriptors
// built from TensorFlow's field numbers, and its own CRC-32C). Debian packages neither
// tensorboard nor tensorflow for Python, so this is the closest independent reader a Debian
// machine has; the test is skipped without python3 or its protobuf module.
func TestWriterPythonProtobuf(t *testing.T) {
	// Debian's own python first: a python3 earlier in PATH (pyenv, a venv) may lack the module.
	py, why := "", "no python3"
	for _, cand := range []string{"/usr/bin/python3", "python3"} {
		p, err := exec.LookPath(cand)
		if err != nil {
			continue
		}
		out, err := exec.Command(p, "-c", "import google.protobuf").CombinedOutput()
		if err == nil {
			py = p
			break
		}
		why = fmt.Sprintf("%s has no protobuf module (Debian: apt-get install python3-protobuf): %s", p, strings.TrimSpace(string(out)))
	}
	if py == "" {
		t.Skip(why)
	}
	w, err := tensorboard.NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := [][3]any{{"train/loss", int64(0), 2.5}, {"val/top1", int64(1 << 40), 0.75}, {"lr", int64(-3), 1e-4}}
	for _, s := range want {
		if err := w.Scalar(s[0].(string), s[1].(int64), s[2].(float64)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "testdata/read_events.py", w.Path()).Output()
	if err != nil {
		t.Fatalf("read_events.py: %v: %s", err, out)
	}
	type event struct {
		WallTime    float64 `json:"wall_time"`
		Step        int64   `json:"step"`
		What        string  `json:"what"`
		FileVersion string  `json:"file_version"`
		Values      [][2]any
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1+len(want) {
		t.Fatalf("python read %d events, want %d:\n%s", len(lines), 1+len(want), out)
	}
	for i, l := range lines {
		var e event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		if e.WallTime < 1.6e9 {
			t.Fatalf("event %d: wall time %v", i, e.WallTime)
		}
		if i == 0 {
			if e.What != "file_version" || e.FileVersion != tensorboard.FileVersion {
				t.Fatalf("first event %s", l)
			}
			continue
		}
		s := want[i-1]
		if e.What != "summary" || e.Step != s[1].(int64) || len(e.Values) != 1 || e.Values[0][0] != s[0] ||
			math.Abs(e.Values[0][1].(float64)-s[2].(float64)) > 1e-7*math.Abs(s[2].(float64)) {
			t.Fatalf("event %d: %s, want %v (value to float32 precision)", i, l, s)
		}
	}
}
