package benchutil

import (
	"slices"
	"testing"
)

// ReadTraces gives each block's time and its frames leaf first, without pprof's marks, and
// refuses a profile without samples.
func TestReadTraces(t *testing.T) {
	const traces = `File: bench
Type: cpu
-----------+-------------------------------------------------------
      30ms   runtime.cgocall
             github.com/gorgonia-parallel/gp/internal/simd.SmallGemm32 (inline)
             main.measure
-----------+-------------------------------------------------------
     1.2s   runtime.memmove
-----------+-------------------------------------------------------
`
	got, err := ReadTraces(traces)
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{
		{0.03, []string{"runtime.cgocall", "github.com/gorgonia-parallel/gp/internal/simd.SmallGemm32", "main.measure"}},
		{1.2, []string{"runtime.memmove"}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d samples, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Seconds != want[i].Seconds || !slices.Equal(got[i].Frames, want[i].Frames) {
			t.Errorf("sample %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if !got[0].Has("simd.SmallGemm") || got[1].Has("simd.") {
		t.Errorf("Has: %v, %v; want true, false", got[0].Has("simd.SmallGemm"), got[1].Has("simd."))
	}
	if _, err := ReadTraces("File: x\n"); err == nil {
		t.Error("a profile without samples was read")
	}
}
