package main

import (
	"strings"
	"testing"
	"time"
)

// Every probe does work in its window and reports a positive rate.
func TestRunProbes(t *testing.T) {
	rates := runProbes(time.Now(), 20*time.Millisecond, 25*time.Millisecond)
	if len(rates) != len(probes) {
		t.Fatalf("%d rates, want %d", len(rates), len(probes))
	}
	for i, r := range rates {
		if !(r > 0) {
			t.Errorf("probe %q: rate %v, want > 0", probes[i].name, r)
		}
	}
}

// The pair's rate is the mean of the two processes', its factor that over the lone rate;
// reports of the wrong length or a lone probe that did nothing are errors.
func TestPairFactors(t *testing.T) {
	n := len(probes)
	fill := func(v float64) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = v * float64(i+1)
		}
		return xs
	}
	m, err := pairFactors(fill(10), fill(8), fill(9))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if want := 8.5 * float64(i+1); m.Pair[i] != want {
			t.Errorf("probe %d: pair %v, want %v", i, m.Pair[i], want)
		}
		if m.Factor[i] != 0.85 {
			t.Errorf("probe %d: factor %v, want 0.85", i, m.Factor[i])
		}
	}
	if s := m.String(); !strings.HasPrefix(s, probes[0].name+" 0.85, ") {
		t.Errorf("String() = %q", s)
	}
	if f := medianFactors([]machinePair{m, m, {Factor: fill(1)}}); f[probes[1].name] != 0.85 {
		t.Errorf("median factors %v, want 0.85 for %q", f, probes[1].name)
	}
	for _, c := range []struct {
		name          string
		alone, p0, p1 []float64
		want          string
	}{
		{"short report", fill(1)[:n-1], fill(1), fill(1), "rates"},
		{"lone probe did nothing", make([]float64, n), fill(1), fill(1), "measured no work"},
	} {
		if _, err := pairFactors(c.alone, c.p0, c.p1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// Per-repetition ratios and differences pair the lists index by index, up to the shorter.
func TestRatiosDifferences(t *testing.T) {
	a, b := []float64{0.9, 0.8, 0.7}, []float64{1, 0.5}
	if got := ratios(a, b); len(got) != 2 || got[0] != 0.9 || got[1] != 1.6 {
		t.Errorf("ratios = %v, want [0.9 1.6]", got)
	}
	want := []float64{b[0] - a[0], b[1] - a[1]} // at run time, as differences computes them
	if got := differences(b, a); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("differences = %v, want %v", got, want)
	}
}
