package benchutil

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		orig := append([]float64(nil), c.xs...)
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %g, want %g", c.xs, got, c.want)
		}
		for i := range orig {
			if orig[i] != c.xs[i] {
				t.Errorf("Median modified its input: %v", c.xs)
			}
		}
	}
}

// TestMain turns the test binary into a launched rank when BENCHUTIL_RANK_MODE is set.
func TestMain(m *testing.M) {
	switch os.Getenv("BENCHUTIL_RANK_MODE") {
	case "ok":
		fmt.Println("progress line")
		fmt.Printf("{\"rank\":%s,\"world\":%s,\"port\":%q}\n", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"), os.Getenv("MASTER_PORT"))
		os.Exit(0)
	case "fail":
		if os.Getenv("RANK") == "1" {
			os.Exit(3)
		}
		fmt.Println(`{"rank":0}`)
		os.Exit(0)
	case "silent":
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type rankResult struct {
	Rank, World int
	Port        string
}

func TestLaunch(t *testing.T) {
	self := func(int) []string { return []string{os.Args[0]} }
	rs, err := Launch[rankResult](3, self, nil, []string{"BENCHUTIL_RANK_MODE=ok"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for r, x := range rs {
		if x.Rank != r || x.World != 3 || x.Port == "" || x.Port != rs[0].Port {
			t.Errorf("rank %d reported %+v", r, x)
		}
	}
	if _, err := Launch[rankResult](2, self, nil, []string{"BENCHUTIL_RANK_MODE=fail"}, time.Minute); err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("a failing rank 1: err = %v, want it named", err)
	}
	if _, err := Launch[rankResult](1, self, nil, []string{"BENCHUTIL_RANK_MODE=silent"}, time.Minute); err == nil || !strings.Contains(err.Error(), "printed no result") {
		t.Errorf("a silent rank: err = %v", err)
	}
}

func TestCPUSeconds(t *testing.T) {
	c0 := CPUSeconds()
	x := 0.0
	for i := range 20_000_000 {
		x += float64(i)
	}
	if c1 := CPUSeconds(); c1 <= c0 || x == 0 {
		t.Errorf("CPU time did not grow over a busy loop: %g -> %g", c0, c1)
	}
}

// A machine's OPENBLAS_CORETYPE is PyTorch's too; otherwise PyTorch is given ours.
func TestTorchEnv(t *testing.T) {
	for _, c := range []struct {
		env  []string
		core string
		want string
	}{
		{[]string{"A=1"}, "SkylakeX", "SkylakeX"},
		{[]string{"OPENBLAS_CORETYPE=Haswell"}, "SkylakeX", "Haswell"},
		{[]string{"A=1"}, "", ""},
	} {
		got := ""
		for _, kv := range TorchEnv(c.env, c.core) {
			if v, ok := strings.CutPrefix(kv, "OPENBLAS_CORETYPE="); ok {
				got = v
			}
		}
		if got != c.want {
			t.Errorf("TorchEnv(%v, %q): OPENBLAS_CORETYPE %q, want %q", c.env, c.core, got, c.want)
		}
	}
}

// TestOutput: a child's writes from several goroutines all arrive while String reads.
func TestOutput(t *testing.T) {
	var o Output
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				o.Write([]byte("ab"))
				_ = o.String()
			}
		}()
	}
	wg.Wait()
	if got := len(o.String()); got != 800 {
		t.Errorf("%d bytes, want 800", got)
	}
}
