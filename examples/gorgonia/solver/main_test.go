package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFiveLines counts this program's diff from examples/gorgonia/single as the README's
// table does: imports, comments and blank lines left out, a replaced line counted as changed.
// The wrapped program may add at most 5 lines and change at most 3.
func TestFiveLines(t *testing.T) {
	added, changed, removed, err := diffCount("../single/main.go", "main.go")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("solver vs single: %d added, %d changed, %d removed", added, changed, removed)
	if added > 5 || changed > 3 || removed > 0 {
		t.Errorf("the wrapped program adds %d lines, changes %d and removes %d; the budget is 5 added, 3 changed, 0 removed", added, changed, removed)
	}
}

// TestRanksMatchSingle runs single and, under gprun with 2 processes, this program, for
// gorgonia's Vanilla, Momentum, Adam and RMSProp solvers on the same global batches: both
// ranks must end bit-identical, and within 1e-5 of single's weights. The tolerance: the two
// runs differ only in how the global batch's gradient is summed (two halves averaged against
// one mean over 64 samples), a float32 rounding of about 1e-7 per step, which 100 steps of
// these solvers do not amplify beyond 1e-5 on weights of order 1.
func TestRanksMatchSingle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three programs")
	}
	dir := t.TempDir()
	bin := func(name, pkg string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out, pkg)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
		}
		return out
	}
	single := bin("single", "../single")
	solver := bin("solver", ".")
	gprun := bin("gprun", "../../../cmd/gprun")
	for _, kind := range []string{"vanilla", "momentum", "adam", "rmsprop"} {
		t.Run(kind, func(t *testing.T) {
			ref := filepath.Join(dir, kind+"-single.bin")
			runCmd(t, single, "-steps", "100", "-solver", kind, "-save", ref)
			runCmd(t, gprun, "--nproc-per-node", "2", "--", solver, "-steps", "100", "-solver", kind,
				"-save", filepath.Join(dir, kind+"-rank$RANK.bin"))
			want := weights(t, ref)
			r0 := weights(t, filepath.Join(dir, kind+"-rank0.bin"))
			r1 := weights(t, filepath.Join(dir, kind+"-rank1.bin"))
			for i := range r0 {
				if math.Float32bits(r0[i]) != math.Float32bits(r1[i]) {
					t.Fatalf("weight %d: rank 0 %v, rank 1 %v: the ranks must be bit-identical", i, r0[i], r1[i])
				}
			}
			worst, at := 0.0, 0
			for i := range want {
				if d := math.Abs(float64(r0[i] - want[i])); d > worst {
					worst, at = d, i
				}
			}
			t.Logf("%s: largest difference from single %.3g (weight %d)", kind, worst, at)
			if worst > 1e-5 {
				t.Errorf("%s: weight %d is %v under DDP, %v in one process: differs by %.3g > 1e-5", kind, at, r0[at], want[at], worst)
			}
		})
	}
}

func runCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
	cmd.WaitDelay = 5 * time.Second
	timer := time.AfterFunc(2*time.Minute, func() {
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

func weights(t *testing.T, path string) []float32 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(raw)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return v
}

// diffCount compares two Go files line by line, without imports, comments and blank lines:
// a run of removed lines followed by added ones counts min(removed, added) changed lines and
// the rest as added or removed.
func diffCount(a, b string) (added, changed, removed int, err error) {
	la, err := codeLines(a)
	if err != nil {
		return 0, 0, 0, err
	}
	lb, err := codeLines(b)
	if err != nil {
		return 0, 0, 0, err
	}
	// Longest common subsequence, then a walk that groups the edits into runs.
	n, m := len(la), len(lb)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if la[i] == lb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	del, ins := 0, 0
	flush := func() {
		c := min(del, ins)
		changed += c
		added += ins - c
		removed += del - c
		del, ins = 0, 0
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && la[i] == lb[j]:
			flush()
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			ins++
			j++
		default:
			del++
			i++
		}
	}
	flush()
	return added, changed, removed, nil
}

// codeLines is the file's lines without blank lines, comments and the import block.
func codeLines(path string) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("diff count: %w", err)
	}
	var out []string
	inImport := false
	for _, l := range bytes.Split(src, []byte("\n")) {
		s := strings.TrimSpace(string(l))
		switch {
		case s == "import (":
			inImport = true
			continue
		case inImport:
			inImport = s != ")"
			continue
		case s == "" || strings.HasPrefix(s, "//") || strings.HasPrefix(s, "import "):
			continue
		}
		out = append(out, s)
	}
	return out, nil
}
