package simd

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// eachLevel is simdtest.Each for this package's own tests (simdtest imports simd).
func eachLevel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, l := range All {
		t.Run(l.String(), func(t *testing.T) {
			restore, err := Set(l)
			if err != nil {
				t.Skip(err)
			}
			defer restore()
			f(t)
		})
	}
}

func TestParseLevel(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Level
		ok   bool
	}{
		{"avx512", AVX512, true}, {"AVX512", AVX512, true}, {"avx-512", AVX512, true},
		{"avx2", AVX2, true}, {" avx2 ", AVX2, true}, {"off", Off, true}, {"go", Off, true},
		{"none", Off, true}, {"sse4", Off, false}, {"avx", Off, false}, {"", Off, false},
	} {
		got, err := ParseLevel(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

// TestSetRefusesMissingLevels: Set accepts exactly the levels up to Detect and changes
// nothing when it refuses one.
func TestSetRefusesMissingLevels(t *testing.T) {
	t.Logf("CPU: %s; best level %s", Features(), Detect())
	for _, l := range All {
		before := Current()
		restore, err := Set(l)
		if (err == nil) != (l <= Detect()) {
			t.Errorf("Set(%s) = %v with best level %s", l, err, Detect())
		}
		if err != nil {
			if Current() != before {
				t.Errorf("refused Set(%s) changed the level to %s", l, Current())
			}
			if !strings.Contains(err.Error(), "this CPU has:") {
				t.Errorf("Set(%s)'s error does not name the CPU's features: %v", l, err)
			}
			continue
		}
		if Current() != l || On() != (l != Off) {
			t.Errorf("after Set(%s): Current %s, On %v", l, Current(), On())
		}
		restore()
		if Current() != before {
			t.Errorf("restore after Set(%s): level %s, want %s", l, Current(), before)
		}
	}
}

// TestEnvRefusesBadLevels runs this test binary with GP_SIMD set to a level the machine
// lacks (when there is one) and to an unknown value: each must exit 2 at start, before any
// test, with a message naming the value, the CPU's features and the accepted values.
func TestEnvRefusesBadLevels(t *testing.T) {
	if os.Getenv("GP_SIMD_CHILD") != "" {
		return
	}
	bad := []string{"sse9", "avx"}
	if Detect() < AVX512 {
		bad = append(bad, "avx512")
	}
	if Detect() < AVX2 {
		bad = append(bad, "avx2")
	}
	for _, v := range bad {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnvRefusesBadLevels$")
		cmd.Env = append(os.Environ(), "GP_SIMD="+v, "GP_SIMD_CHILD=1")
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Errorf("GP_SIMD=%s: exit %v, want status 2; output:\n%s", v, err, out)
			continue
		}
		msg := string(out)
		for _, want := range []string{"GP_SIMD=" + v, "this CPU has:", "accepted"} {
			if !strings.Contains(msg, want) {
				t.Errorf("GP_SIMD=%s: message lacks %q:\n%s", v, want, msg)
			}
		}
		t.Logf("GP_SIMD=%s: %s", v, strings.TrimSpace(msg))
	}
	for _, l := range All {
		if Supported(l) != nil {
			continue
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnvLevelApplies$")
		cmd.Env = append(os.Environ(), "GP_SIMD="+l.String(), "GP_SIMD_CHILD="+l.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GP_SIMD=%s: %v\n%s", l, err, out)
		}
	}
}

// TestEnvLevelApplies is TestEnvRefusesBadLevels's child: GP_SIMD's level is the active one.
func TestEnvLevelApplies(t *testing.T) {
	want := os.Getenv("GP_SIMD_CHILD")
	if want == "" || want == "1" {
		t.Skip("run by TestEnvRefusesBadLevels")
	}
	if Current().String() != want {
		t.Fatalf("GP_SIMD=%s: active level %s", want, Current())
	}
}
