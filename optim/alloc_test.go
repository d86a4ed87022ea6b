package optim

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// recordingAlloc hands out heap memory and remembers every buffer, as ZeRO's file
// allocator keeps its mapped regions.
type recordingAlloc struct {
	bufs  map[string][]float32
	fail  error // returned for every Alloc when set
	short bool  // return one element fewer than asked
}

func (a *recordingAlloc) Alloc(name string, n int) ([]float32, error) {
	if a.fail != nil {
		return nil, a.fail
	}
	if a.short {
		n--
	}
	if a.bufs == nil {
		a.bufs = map[string][]float32{}
	}
	a.bufs[name] = make([]float32, n)
	return a.bufs[name], nil
}

// manySegments returns n segments of varied lengths (1..97 elements), every one whole
// parameter "p<i>", with deterministic data; the gradients are set by setGrads.
func manySegments(n int) []Segment {
	var segs []Segment
	for i := range n {
		l := 1 + (i*37)%97
		s := Segment{Name: fmt.Sprintf("p%d", i), Data: make([]float32, l), Grad: make([]float32, l), WeightDecay: float64(i%3) * 0.05}
		for j := range s.Data {
			s.Data[j] = float32((i*31+j)%29)/29 - 0.5
		}
		segs = append(segs, s)
	}
	return segs
}

func setGrads(segs []Segment, step int) {
	for i, s := range segs {
		for j := range s.Grad {
			s.Grad[j] = float32((i*7+j*3+step*13)%41)/20 - 1
		}
	}
}

// TestAllocator checks that WithAllocator receives every per-element state buffer, one per
// kind over all segments, that the optimizer's state lives in it (its state dict aliases
// it), that the trajectory is bit-identical to the heap's, that StateBytes counts it, and
// that an allocator's failure is an error naming the state.
func TestAllocator(t *testing.T) {
	for _, tc := range []struct {
		c     optCase
		kinds []string
	}{
		{optCase{Kind: "sgd", LR: 0.1}, nil},
		{optCase{Kind: "sgd", LR: 0.1, Momentum: 0.9}, []string{kindMomentum}},
		{optCase{Kind: "adam", LR: 1e-2}, []string{kindExpAvg, kindExpAvgSq}},
		{optCase{Kind: "adamw", LR: 1e-2, AMSGrad: true}, []string{kindExpAvg, kindExpAvgSq, kindMaxExpAvgSq}},
	} {
		t.Run(fmt.Sprintf("%s-%d-kinds", tc.c.Kind, len(tc.kinds)), func(t *testing.T) {
			run := func(opts ...Option) ([]Segment, Optimizer) {
				segs := manySegments(20)
				o, err := newOpt(tc.c, segs, opts...)
				if err != nil {
					t.Fatal(err)
				}
				for s := range 3 {
					setGrads(segs, s)
					if err := o.Step(); err != nil {
						t.Fatal(err)
					}
				}
				return segs, o
			}
			heapSegs, _ := run()
			a := &recordingAlloc{}
			segs, o := run(WithAllocator(a))
			total := 0
			for _, s := range segs {
				total += len(s.Data)
			}
			if len(a.bufs) != len(tc.kinds) {
				t.Fatalf("allocated %d buffers, want %v", len(a.bufs), tc.kinds)
			}
			for _, k := range tc.kinds {
				if len(a.bufs[k]) != total {
					t.Fatalf("buffer %q: %d elements, want %d", k, len(a.bufs[k]), total)
				}
			}
			if got, want := o.(interface{ StateBytes() int64 }).StateBytes(), 4*int64(total*len(tc.kinds)); got != want {
				t.Errorf("StateBytes %d, want %d", got, want)
			}
			for _, e := range o.StateDict() {
				if e.F32 == nil {
					continue
				}
				kind := e.Name[strings.LastIndexByte(e.Name, '.')+1:]
				if !within(e.F32, a.bufs[kind]) {
					t.Errorf("state %s is not in the allocator's %q buffer", e.Name, kind)
				}
			}
			for i := range segs {
				for j := range segs[i].Data {
					if segs[i].Data[j] != heapSegs[i].Data[j] {
						t.Fatalf("segment %d element %d: %v with the allocator, %v on the heap", i, j, segs[i].Data[j], heapSegs[i].Data[j])
					}
				}
			}
			if len(tc.kinds) == 0 {
				return
			}
			cause := errors.New("mmap: no space left on device")
			_, err := newOpt(tc.c, manySegments(3), WithAllocator(&recordingAlloc{fail: cause}))
			if !errors.Is(err, cause) || !strings.Contains(err.Error(), tc.kinds[0]) {
				t.Errorf("failing allocator: %v, want an error naming %q and wrapping the cause", err, tc.kinds[0])
			}
			if _, err := newOpt(tc.c, manySegments(3), WithAllocator(&recordingAlloc{short: true})); err == nil || !strings.Contains(err.Error(), "allocator returned") {
				t.Errorf("short allocation: %v", err)
			}
		})
	}
}

// within reports whether s lies inside buf's memory.
func within(s, buf []float32) bool {
	if len(s) == 0 || len(buf) == 0 {
		return len(s) == 0
	}
	lo, hi := uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&buf[len(buf)-1]))
	p, q := uintptr(unsafe.Pointer(&s[0])), uintptr(unsafe.Pointer(&s[len(s)-1]))
	return p >= lo && q <= hi
}

// TestSplit checks the workers' plan: every element of every chunk exactly once, in order,
// at most workers lists of at least minChunk elements and within one element of each other
// (the last may be shorter), and one list when the total is under 2·minChunk.
func TestSplit(t *testing.T) {
	lens := func(n int) []chunk {
		var cs []chunk
		for i, l := range manySegments(n) {
			cs = append(cs, chunk{i, 0, len(l.Data)})
		}
		return cs
	}
	for _, tc := range []struct {
		name              string
		chunks            []chunk
		workers, minChunk int
		wantLists         int
	}{
		{"serial", lens(30), 1, 1, 1},
		{"too small to split", lens(3), 8, 1000, 1},
		{"many small segments", lens(60), 4, 100, 4},
		{"fewer pieces than workers", lens(60), 64, 1000, 2},
		{"one large segment", []chunk{{0, 0, 100003}}, 7, 1000, 7},
		{"ranges inside segments", []chunk{{2, 5, 90}, {3, 0, 1}, {7, 40, 400}}, 3, 10, 3},
		{"empty", nil, 4, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := split(tc.chunks, tc.workers, tc.minChunk)
			if len(plan) != tc.wantLists {
				t.Fatalf("%d lists, want %d", len(plan), tc.wantLists)
			}
			var flat []chunk
			sizes := make([]int, len(plan))
			for i, list := range plan {
				for _, c := range list {
					sizes[i] += c.hi - c.lo
					if n := len(flat); n > 0 && flat[n-1].seg == c.seg && flat[n-1].hi == c.lo {
						flat[n-1].hi = c.hi // a chunk cut between two lists
						continue
					}
					flat = append(flat, c)
				}
			}
			var want []chunk
			for _, c := range tc.chunks {
				if c.hi > c.lo {
					want = append(want, c)
				}
			}
			if fmt.Sprint(flat) != fmt.Sprint(want) {
				t.Fatalf("plan covers %v, want %v", flat, want)
			}
			if len(plan) > 1 {
				for i, n := range sizes {
					if n < tc.minChunk || n > sizes[0] || (i < len(sizes)-1 && n != sizes[0]) {
						t.Errorf("list sizes %v (minChunk %d)", sizes, tc.minChunk)
						break
					}
				}
			}
		})
	}
}

// TestWorkersManySegments: with many small segments (a ZeRO shard), Step and StepGrads
// split across workers give the serial path's bits.
func TestWorkersManySegments(t *testing.T) {
	for _, c := range []optCase{
		{Kind: "sgd", LR: 0.1, Momentum: 0.9, Decay: 0.01},
		{Kind: "adam", LR: 1e-2, Decay: 0.1},
		{Kind: "adamw", LR: 1e-2, Decay: 0.1, AMSGrad: true},
	} {
		run := func(ranged bool, opts ...Option) []Segment {
			segs := manySegments(60)
			o, err := newOpt(c, segs, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for s := range 3 {
				setGrads(segs, s)
				if !ranged {
					if err := o.Step(); err != nil {
						t.Fatal(err)
					}
					continue
				}
				r := o.(Ranged)
				if err := r.BeginStep(); err != nil {
					t.Fatal(err)
				}
				for _, sg := range segs {
					if err := r.StepGrads(sg.Grad); err != nil {
						t.Fatal(err)
					}
				}
				if err := r.EndStep(); err != nil {
					t.Fatal(err)
				}
			}
			return segs
		}
		serial := run(false)
		for _, v := range []struct {
			name string
			segs []Segment
		}{
			{"Step, 4 workers", run(false, WithWorkers(4, 50))},
			{"StepGrads, 3 workers", run(true, WithWorkers(3, 10))},
		} {
			for i := range serial {
				for j := range serial[i].Data {
					if serial[i].Data[j] != v.segs[i].Data[j] {
						t.Fatalf("%s %s: segment %d element %d: %v, serial %v", c.Kind, v.name, i, j, v.segs[i].Data[j], serial[i].Data[j])
					}
				}
			}
		}
	}
}
