package main

import "testing"

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
