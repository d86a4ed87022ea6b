package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// The coordinator's deadline error alone is a timed run's end; anything else that failed is
// a finding.
func TestDeadlineRace(t *testing.T) {
	for _, c := range []struct {
		name, output string
		want         bool
	}{
		{"deadline only", "fuzz: elapsed: 5s, execs: 63851 (14763/sec)\n--- FAIL: FuzzAdmit (5.05s)\n    context deadline exceeded\nFAIL\nexit status 1\n", true},
		{"crasher written", "--- FAIL: FuzzAdmit (5.05s)\n    context deadline exceeded\n    Failing input written to testdata/fuzz/FuzzAdmit/abc\nFAIL\n", false},
		{"panic", "--- FAIL: FuzzAdmit (0.2s)\n    context deadline exceeded\npanic: runtime error\n", false},
		{"another message", "--- FAIL: FuzzAdmit (5.05s)\n    admit.go:12: refused a valid registration\nFAIL\n", false},
		{"another target", "--- FAIL: FuzzMasterOf (5.05s)\n    context deadline exceeded\nFAIL\n", false},
		{"deadline then a second line", "--- FAIL: FuzzAdmit (5.05s)\n    context deadline exceeded\n    fuzz_test.go:40: wrong round trip\nFAIL\n", false},
	} {
		if got := deadlineRace(c.output, "FuzzAdmit"); got != c.want {
			t.Errorf("%s: deadlineRace = %v, want %v", c.name, got, c.want)
		}
	}
}

// A merge keeps the targets that did not run, each saying which run measured it (the old
// file's command when it did not say), and puts the targets that ran in their place.
func TestMergeIntoKeepsProvenance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fuzz.json")
	old := `{"command": "go run ./bench/fuzz -fuzztime 5m", "machine": {"cpu": "Old CPU", "cores": 2},
		"targets": [{"package": "./a", "name": "FuzzA", "execs": 10}, {"package": "./b", "name": "FuzzB", "execs": 20}]}`
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	m := benchutil.Machine{CPU: "New CPU", Cores: 2}
	ran := []*target{{Package: "./b", Name: "FuzzB", Execs: 30, Command: "go run ./bench/fuzz -run FuzzB", Machine: &m}}
	got := mergeInto(path, ran)
	if len(got) != 2 {
		t.Fatalf("%d targets, want 2", len(got))
	}
	a, b := got[0], got[1]
	if a.Name != "FuzzA" || a.Execs != 10 || a.Command != "go run ./bench/fuzz -fuzztime 5m" || a.Machine == nil || a.Machine.CPU != "Old CPU" {
		t.Errorf("kept target %+v (machine %+v), want FuzzA's 10 execs under the old file's command and machine", a, a.Machine)
	}
	if b.Name != "FuzzB" || b.Execs != 30 || b.Command != "go run ./bench/fuzz -run FuzzB" || b.Machine.CPU != "New CPU" {
		t.Errorf("merged target %+v, want the new run's FuzzB", b)
	}
}

// A target fails the file when its run failed or it wrote a failing input, whichever run of
// a merged file measured it.
func TestCountFailing(t *testing.T) {
	for _, c := range []struct {
		name string
		ts   []*target
		want int
	}{
		{"none", nil, 0},
		{"clean", []*target{{Name: "FuzzA"}, {Name: "FuzzB", Crashers: []string{}}}, 0},
		{"a crasher kept from an earlier run and a failed run", []*target{{Name: "FuzzA", Crashers: []string{"testdata/fuzz/FuzzA/1"}}, {Name: "FuzzB", Failure: "exit status 1"}, {Name: "FuzzC"}}, 2},
	} {
		if got := countFailing(c.ts); got != c.want {
			t.Errorf("%s: %d failing, want %d", c.name, got, c.want)
		}
	}
}
