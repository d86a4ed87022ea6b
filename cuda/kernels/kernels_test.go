package kernels

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every extern "C" __global__ of kernels.cu is in the committed PTX, except those listed as
// Pending, which are not: the PTX is not stale, and Pending is emptied when it is regenerated.
func TestPTXMatchesSource(t *testing.T) {
	src, err := os.ReadFile("kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range regexp.MustCompile(`__global__ void (\w+)\(`).FindAllStringSubmatch(string(src), -1) {
		want = append(want, m[1])
	}
	got := Names()
	for _, p := range Pending {
		if slices.Contains(got, p) {
			t.Errorf("kernel %s is in kernels.ptx now: remove it from Pending", p)
		}
		if !slices.Contains(want, p) {
			t.Errorf("pending kernel %s is not in kernels.cu", p)
		}
		want = slices.DeleteFunc(want, func(n string) bool { return n == p })
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("kernels.ptx has %v\nkernels.cu declares %v\nrun go generate ./cuda/kernels", got, want)
	}
	if !strings.Contains(PTX, ".target sm_80") {
		t.Fatal("PTX does not target sm_80")
	}
}

// Where nvcc is installed, the committed PTX is what go generate produces.
func TestRegenerateIdentical(t *testing.T) {
	if _, err := exec.LookPath("nvcc"); err != nil {
		t.Skip("nvcc not installed (not needed to build)")
	}
	out := t.TempDir() + "/k.ptx"
	if b, err := exec.Command("nvcc", "-arch=compute_80", "-ptx", "-O3", "-o", out, "kernels.cu").CombinedOutput(); err != nil {
		t.Fatalf("nvcc: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != PTX {
		t.Fatal("kernels.ptx differs from nvcc's output: run go generate ./cuda/kernels")
	}
}
