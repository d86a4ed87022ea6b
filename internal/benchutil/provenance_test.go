package benchutil

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"amp", nil, "go run ./bench/amp"},
		{"models", []string{"-threads", "1,2", "-out", "/tmp/m.json"}, "go run ./bench/models -threads 1,2 -out /tmp/m.json"},
		{"fuzz", []string{"-run", "Fuzz.*Read$", "-fuzztime=5m"}, "go run ./bench/fuzz -run 'Fuzz.*Read$' -fuzztime=5m"},
		{"netbed", []string{"-o", "a b", "-python", ""}, "go run ./bench/netbed -o 'a b' -python ''"},
		{"x", []string{"it's"}, `go run ./bench/x 'it'\''s'`},
	} {
		if got := Command(c.name, c.args); got != c.want {
			t.Errorf("Command(%q, %q) = %q, want %q", c.name, c.args, got, c.want)
		}
	}
}

func TestProvenanceJSON(t *testing.T) {
	p := Start("ops", []string{"-reps", "1"})
	if p.Command != "go run ./bench/ops -reps 1" || p.Machine.Cores < 1 {
		t.Fatalf("Start = %+v", p)
	}
	for _, c := range []struct {
		name    string
		end     float64
		wantEnd bool
	}{{"no end load", 0, false}, {"end load", 1.5, true}} {
		p.LoadEnd = c.end
		b, err := json.Marshal(Rows[struct {
			X int `json:"x"`
		}]{Provenance: p, Rows: []struct {
			X int `json:"x"`
		}{{1}, {2}}})
		if err != nil {
			t.Fatal(err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(b, &top); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"command", "machine", "rows"} {
			if top[k] == nil {
				t.Errorf("%s: %s has no top-level %q", c.name, b, k)
			}
		}
		if _, ok := top["load_avg_1m_end"]; ok != c.wantEnd {
			t.Errorf("%s: load_avg_1m_end present %v, want %v: %s", c.name, ok, c.wantEnd, b)
		}
		if strings.Contains(string(b), `"units"`) {
			t.Errorf("%s: empty units written: %s", c.name, b)
		}
		doc := map[string]any{}
		p.Set(doc)
		if doc["command"] != p.Command || !reflect.DeepEqual(doc["machine"], p.Machine) {
			t.Errorf("%s: Set wrote %v", c.name, doc)
		}
		if _, ok := doc["load_avg_1m_end"]; ok != c.wantEnd {
			t.Errorf("%s: Set load_avg_1m_end present %v, want %v", c.name, ok, c.wantEnd)
		}
	}
}

func TestDecodeRows(t *testing.T) {
	type row struct {
		Op string  `json:"op"`
		S  float64 `json:"latency_s"`
	}
	want := []row{{"all-reduce", 0.5}, {"broadcast", 0.25}}
	for _, c := range []struct {
		name, in string
		want     []row
		err      bool
	}{
		{"object", `{"command":"go run ./bench/comm","machine":{},"rows":[{"op":"all-reduce","latency_s":0.5},{"op":"broadcast","latency_s":0.25}]}`, want, false},
		{"bare array", "\n [{\"op\":\"all-reduce\",\"latency_s\":0.5},{\"op\":\"broadcast\",\"latency_s\":0.25}]", want, false},
		{"empty rows", `{"rows":[]}`, []row{}, false},
		{"no rows", `{"command":"x"}`, nil, true},
		{"not JSON", `{"rows":[`, nil, true},
		{"wrong row type", `[1,2]`, nil, true},
	} {
		got, err := DecodeRows[row]([]byte(c.in))
		if (err != nil) != c.err {
			t.Errorf("%s: err = %v, want error %v", c.name, err, c.err)
			continue
		}
		if !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: rows = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// Save writes the result whole (making its folder), leaves no temporary file, keeps the old
// result when it cannot write, and prints the file with its machine, loads and command.
func TestSave(t *testing.T) {
	p := Provenance{Command: "go run ./bench/x -reps 1", Machine: Machine{CPU: "Some CPU", Flags: []string{"avx2"}, Cores: 2, Load: 0.5}, LoadEnd: 1.25}
	dir := t.TempDir()
	path := filepath.Join(dir, "results", "x.json")
	var out bytes.Buffer
	if err := p.Save(&out, path, Rows[int]{Provenance: p, Rows: []int{1, 2}}); err != nil {
		t.Fatal(err)
	}
	want := "wrote " + path + " (Some CPU, avx2, 2 cores, load 0.50; load at the end 1.25): go run ./bench/x -reps 1\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := DecodeRows[int](b)
	if err != nil || !reflect.DeepEqual(rows, []int{1, 2}) {
		t.Errorf("read back rows %v, %v", rows, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v; want 0644", fi.Mode().Perm(), err)
	}
	if err := p.Save(&out, path, map[string]any{"bad": func() {}}); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("unencodable result: error %v, want one naming %s", err, path)
	}
	if b2, _ := os.ReadFile(path); !bytes.Equal(b, b2) {
		t.Errorf("a failed Save changed the file")
	}
	// A rename that fails (the target is a folder with a file in it) leaves no temporary
	// file behind.
	blocked := filepath.Join(filepath.Dir(path), "blocked.json")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p.Save(&out, blocked, Rows[int]{Provenance: p}); err == nil || !strings.Contains(err.Error(), blocked) {
		t.Errorf("Save onto a folder: error %v, want one naming %s", err, blocked)
	}
	es, _ := os.ReadDir(filepath.Dir(path))
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"blocked.json", "x.json"}) {
		t.Errorf("folder holds %v, want the result and the folder alone", names)
	}
}
