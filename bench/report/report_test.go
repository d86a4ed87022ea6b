package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSectionProvenance checks that each section says the command, machine, CPU flags and load
// the file records, takes the command from the table a benchmark writes beside its JSON, and
// says "not recorded" for each one a file lacks.
func TestSectionProvenance(t *testing.T) {
	cases := []struct {
		name, json, txt string
		want, notWant   []string
	}{
		{
			name: "solver.json",
			json: `{"command":"go run ./bench/solver -reps 3","machine":{"cpu":"Test CPU","flags":["avx2","fma"],"cores":2,"load_avg_1m":1.4},"rows":[{"model":"mlp","step_ms":35.81286165}],"unit":"ms a step"}`,
			want: []string{"- command: `go run ./bench/solver -reps 3`", "- machine: Test CPU, 2 cores", "- CPU flags: avx2 fma",
				"- load: 1.4 (one-minute load average", "- unit: ms a step", "| model | step_ms |", "| mlp | 35.81 |"},
			notWant: []string{"not recorded in the file"},
		},
		{
			name: "comm.json",
			json: `[{"op":"all-reduce","bytes":4096,"loadavg":1.35},{"op":"broadcast","bytes":268435456,"loadavg":7.2,"note":"a|b"}]`,
			want: []string{"- command: not recorded in the file (the benchmark: `go run ./bench/comm`)", "- machine: not recorded in the file",
				"- CPU flags: not recorded in the file", "- load: 1.35 to 7.2 over 2 readings (`loadavg`)", "| broadcast | 268435456 | 7.2 | a\\|b |"},
		},
		{
			name:    "compress-2x2.json",
			json:    `[{"hook":"none","loadavg_before":10.45}]`,
			txt:     "go run ./bench/compress -o=x.json -steps=150  (2026-01-01T00:00:00Z, 2 hosts)\n\n table\n",
			want:    []string{"- command: `go run ./bench/compress -o=x.json -steps=150`", "- load: 10.45 (`loadavg_before`)", "[compress-2x2.json](#compress-2x2json) | `bench/compress` | recorded"},
			notWant: []string{"2026"},
		},
		{
			name: "models.json",
			json: `{"command":"go run ./bench/models -threads 1","machine":{"cpu":"Test CPU","flags":[],"cores":2,"load_avg_1m":2.5},"load_avg_1m_end":3.25,"units":{"size":"pixels per side"},"rows":[{"arch":"resnet18","size":64,"imgs_per_s":91.65}]}`,
			want: []string{"- command: `go run ./bench/models -threads 1`", "- load: 2.5 when the run started, 3.25 when it ended (one-minute load average)",
				"| `size` | pixels per side |", "| arch | size | imgs_per_s |", "| resnet18 | 64 | 91.65 |", "[models.json](#modelsjson) | `bench/models` | recorded | recorded | recorded |"},
			notWant: []string{"not recorded in the file", "`load_avg_1m_end`"},
		},
		{
			name:    "ops.json",
			json:    `{"bench":"ops","generated_at":"2026-01-01T00:00:00Z","seed":1796167998586090434,"convs":[{"name":"3x3","pct":91.62857}]}`,
			want:    []string{"| `seed` | 1796167998586090434 |", "### `convs`", "| 3x3 | 91.63 |", "- load: not recorded in the file"},
			notWant: []string{"generated_at", "2026"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, c.name), []byte(c.json), 0o644); err != nil {
				t.Fatal(err)
			}
			if c.txt != "" {
				if err := os.WriteFile(filepath.Join(dir, strings.TrimSuffix(c.name, ".json")+".txt"), []byte(c.txt), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			page, err := render(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(string(page), w) {
					t.Errorf("page lacks %q:\n%s", w, page)
				}
			}
			// The page names dir, whose random digits may hold any text: look past it.
			rest := strings.ReplaceAll(string(page), dir, "DIR")
			for _, w := range c.notWant {
				if strings.Contains(rest, w) {
					t.Errorf("page has %q:\n%s", w, page)
				}
			}
		})
	}
}

// TestBadInput checks that a folder without results and a file that is not JSON fail with
// errors naming the folder or file.
func TestBadInput(t *testing.T) {
	empty := t.TempDir()
	if _, err := render(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("empty folder: err %v, want one naming %s", err, empty)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "x.json"), []byte(`{"a":1} trailing`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := render(bad); err == nil || !strings.Contains(err.Error(), "x.json") {
		t.Errorf("bad file: err %v, want one naming x.json", err)
	}
}

// TestTracesLeftOut: a Chrome trace beside the results gets no section.
func TestTracesLeftOut(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"ddp.json": `{"efficiency":0.9}`, "ddp_trace.json": `{"traceEvents":[]}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	page, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "\n## ddp.json\n") || strings.Contains(string(page), "ddp_trace") {
		t.Errorf("want a section for ddp.json and none for ddp_trace.json:\n%s", page)
	}
}

// TestCommittedResults renders every committed result: each file has its section, and the
// folded tables close.
func TestCommittedResults(t *testing.T) {
	dir := filepath.Join("..", "results")
	page, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	names, err := resultFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(page), "\n## "+filepath.Base(n)+"\n") {
			t.Errorf("no section for %s", n)
		}
	}
	if o, c := strings.Count(string(page), "<details>"), strings.Count(string(page), "</details>"); o != c {
		t.Errorf("%d <details> against %d </details>", o, c)
	}
}
