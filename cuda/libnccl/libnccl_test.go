package libnccl

import (
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

func TestNoCgo(t *testing.T) {
	if dl.Available {
		t.Skip("built with cgo")
	}
	if _, err := Version(); !errors.Is(err, dl.ErrNoCgo) {
		t.Fatalf("Version: %v, want ErrNoCgo", err)
	}
}

// Two ranks on the fake library: the unique id travels by value, collectives reduce.
func TestFakeTwoRanks(t *testing.T) {
	cudatest.Require(t)
	if v, err := Version(); err != nil || v != 22703 {
		t.Fatalf("Version = %d, %v", v, err)
	}
	id, err := GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CommInitRank(2, UniqueID{}, 0); err == nil {
		t.Fatal("zero id accepted")
	} else if !contains(err.Error(), "ncclCommInitRank: invalid argument") {
		t.Fatalf("error %q", err)
	}
	bufs := [2][]float32{{1, 2, 3, 4}, {10, 20, 30, 40}}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := CommInitRank(2, id, r)
			if err != nil {
				errs[r] = err
				return
			}
			p := addr(bufs[r])
			errs[r] = errors.Join(c.AllReduce(p, p, 4, Float32, Sum, 0), c.Destroy())
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if bufs[r][3] != 44 || bufs[r][0] != 11 {
			t.Fatalf("rank %d: %v", r, bufs[r])
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
