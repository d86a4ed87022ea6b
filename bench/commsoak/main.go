// Command commsoak is the process group's soak run (not part of CI): 10,000 mixed collectives
// of random sizes at world 4 over the default transport (shared memory on one host; set
// GP_COMM_TRANSPORT=tcp for loopback TCP), each result checked against a closed-form
// checksum, then goroutine and file-descriptor counts compared with the baseline taken before
// the group was created. Half of the all-reduces run on a buffer from comm.AllocFloat32
// (in place through shared memory, as DDP's gradients); that buffer's mapping outlives the
// group by design, and is the one shared-memory mapping allowed to remain.
//
//	go run ./bench/commsoak [-ops 10000] [-world 4]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/launch"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
)

type report struct {
	Rank            int     `json:"rank"`
	Ops             int     `json:"ops"`
	Errors          int     `json:"errors"`
	Bytes           int64   `json:"bytes"`
	Seconds         float64 `json:"seconds"`
	GoroutinesStart int     `json:"goroutines_start"`
	GoroutinesEnd   int     `json:"goroutines_end"`
	FDsStart        int     `json:"fds_start"`
	FDsEnd          int     `json:"fds_end"`
	Transport       string  `json:"transport"`
	SHMMapsEnd      int     `json:"shm_maps_end"`
	SharedOps       int     `json:"shared_ops"`
	FirstError      string  `json:"first_error,omitempty"`
}

func main() {
	nops := flag.Int("ops", 10000, "collectives per rank")
	world := flag.Int("world", 4, "ranks")
	flag.Parse()
	if os.Getenv("GP_SOAK_WORKER") != "" {
		rep := soak(*nops)
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
		if rep.Errors > 0 {
			os.Exit(1)
		}
		return
	}
	self, _ := os.Executable()
	var out, errb bytes.Buffer
	start := time.Now()
	err := launch.Run(context.Background(), launch.Config{NProcPerNode: *world, Program: self,
		Args: []string{"-ops", fmt.Sprint(*nops)}, Env: []string{"GP_SOAK_WORKER=1"}, Stdout: &out, Stderr: &errb})
	fmt.Printf("commsoak: world %d, %d collectives per rank, %.1fs wall\n", *world, *nops, time.Since(start).Seconds())
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if i := strings.Index(sc.Text(), "{"); i >= 0 {
			var r report
			if json.Unmarshal([]byte(sc.Text()[i:]), &r) == nil {
				fmt.Printf("rank %d (%s): %d ops (%d all-reduces in the shared buffer), %d errors, %.1f MB moved, %.1fs; goroutines %d -> %d, fds %d -> %d, shm mappings left %d %s\n",
					r.Rank, r.Transport, r.Ops, r.SharedOps, r.Errors, float64(r.Bytes)/1e6, r.Seconds, r.GoroutinesStart, r.GoroutinesEnd,
					r.FDsStart, r.FDsEnd, r.SHMMapsEnd, r.FirstError)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "commsoak: %v\n%s", err, errb.String())
		os.Exit(1)
	}
}

// shmMaps counts the shared-memory transport's ring mappings still in this process.
func shmMaps() int {
	b, _ := os.ReadFile("/proc/self/maps")
	return strings.Count(string(b), "/dev/shm/gp-comm-")
}

func fds() int {
	es, _ := os.ReadDir("/proc/self/fd")
	return len(es)
}

// value is rank r's element j of collective i: small integers, so float32 sums are exact and
// the expected result has a closed form.
func value(r, i, j int) float32 { return float32((r+1)*((i+j)%7) - 3) }

func soak(nops int) report {
	ctx := context.Background()
	// The runtime's network poller keeps two descriptors (epoll, eventfd) once any socket has
	// been used; create them before the baseline so that only the group's own count.
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
	}
	// One rank of several on this host: the runtime's monitor thread yields the cores to the
	// compute (parallel/sysmon), as in every program the launcher starts. Before the baseline:
	// the watcher it leaves runs for the life of the process.
	if _, err := sysmon.Lower(); err != nil {
		return report{Errors: 1, FirstError: err.Error()}
	}
	rep := report{GoroutinesStart: runtime.NumGoroutine(), FDsStart: fds()}
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(2*time.Minute))
	if err != nil {
		rep.Errors, rep.FirstError = 1, err.Error()
		return rep
	}
	n, r := g.Size(), g.Rank()
	rep.Rank, rep.Transport = r, comm.TransportOf(g)
	const maxCount = 1 << 21
	shared, err := comm.AllocFloat32(ctx, g, maxCount)
	if err != nil {
		rep.Errors, rep.FirstError = 1, err.Error()
		return rep
	}
	keptMaps := shmMaps() // the shared buffer's own mapping stays after Close
	fail := func(i int, format string, args ...any) {
		rep.Errors++
		if rep.FirstError == "" {
			rep.FirstError = fmt.Sprintf("op %d: ", i) + fmt.Sprintf(format, args...)
		}
	}
	rng := rand.New(rand.NewSource(1)) // same sequence on every rank
	start := time.Now()
	type pending struct {
		w     comm.Work
		check func() error
	}
	var queue []pending
	drain := func(i int) {
		for _, p := range queue {
			if err := p.w.Wait(ctx); err != nil {
				fail(i, "%v", err)
			} else if err := p.check(); err != nil {
				fail(i, "%v", err)
			}
		}
		queue = queue[:0]
	}
	for i := range nops {
		count := int(float64(1) * float64(rng.Int63n(1<<uint(rng.Intn(21)+1)))) // 0 .. 2M elements, log-spread
		kind := rng.Intn(6)
		rep.Bytes += int64(4 * count)
		var p pending
		switch kind {
		case 0, 1: // all-reduce sum; kind 1 in the shared buffer
			b := make(comm.F32, count)
			if kind == 1 {
				drain(i) // nothing else may use the shared buffer meanwhile
				b = shared[:count]
				rep.SharedOps++
			}
			for j := range b {
				b[j] = value(r, i, j)
			}
			p = pending{g.AllReduce(b, comm.Sum), func() error {
				for j, v := range b {
					want := float32(0)
					for q := range n {
						want += value(q, i, j)
					}
					if v != want {
						return fmt.Errorf("all-reduce[%d] = %v, want %v", j, v, want)
					}
				}
				return nil
			}}
		case 2: // reduce-scatter max
			src := make(comm.F32, count)
			for j := range src {
				src[j] = value(r, i, j)
			}
			lo, hi := comm.ShardRange(count, n, r)
			dst := make(comm.F32, hi-lo)
			p = pending{g.ReduceScatter(dst, src, comm.Max), func() error {
				for j, v := range dst {
					want := value(0, i, lo+j)
					for q := 1; q < n; q++ {
						want = max(want, value(q, i, lo+j))
					}
					if v != want {
						return fmt.Errorf("reduce-scatter[%d] = %v, want %v", j, v, want)
					}
				}
				return nil
			}}
		case 3: // all-gather
			lo, hi := comm.ShardRange(count, n, r)
			src := make(comm.F32, hi-lo)
			for j := range src {
				src[j] = value(r, i, lo+j)
			}
			dst := make(comm.F32, count)
			p = pending{g.AllGather(dst, src), func() error {
				for q := range n {
					qlo, qhi := comm.ShardRange(count, n, q)
					for j := qlo; j < qhi; j++ {
						if dst[j] != value(q, i, j) {
							return fmt.Errorf("all-gather[%d] from rank %d wrong", j, q)
						}
					}
				}
				return nil
			}}
		case 4: // broadcast
			root := i % n
			b := make(comm.F32, count)
			if r == root {
				for j := range b {
					b[j] = value(root, i, j)
				}
			}
			p = pending{g.Broadcast(b, root), func() error {
				for j, v := range b {
					if v != value(root, i, j) {
						return fmt.Errorf("broadcast[%d] wrong", j)
					}
				}
				return nil
			}}
		case 5: // barrier, or a send/recv ring
			if i%2 == 0 {
				p = pending{g.Barrier(), func() error { return nil }}
			} else {
				out := make(comm.F32, count%4096)
				for j := range out {
					out[j] = value(r, i, j)
				}
				in := make(comm.F32, len(out))
				prev := (r + n - 1) % n
				ws := g.Send(out, (r+1)%n, i)
				wr := g.Recv(in, prev, i)
				p = pending{wr, func() error {
					if err := ws.Wait(ctx); err != nil {
						return err
					}
					for j, v := range in {
						if v != value(prev, i, j) {
							return fmt.Errorf("recv[%d] wrong", j)
						}
					}
					return nil
				}}
			}
		}
		queue = append(queue, p)
		if len(queue) >= 1+rng.Intn(8) { // up to 8 operations outstanding
			drain(i)
		}
	}
	drain(nops)
	rep.Ops = nops
	rep.Seconds = time.Since(start).Seconds()
	if err := g.Close(ctx); err != nil {
		fail(nops, "close: %v", err)
	}
	// Goroutines that served the group exit asynchronously after Close; give them a moment.
	for t := 0; t < 50 && runtime.NumGoroutine() > rep.GoroutinesStart; t++ {
		time.Sleep(20 * time.Millisecond)
	}
	rep.GoroutinesEnd, rep.FDsEnd, rep.SHMMapsEnd = runtime.NumGoroutine(), fds(), shmMaps()-min(keptMaps, 1)
	if rep.GoroutinesEnd > rep.GoroutinesStart || rep.FDsEnd > rep.FDsStart || rep.SHMMapsEnd > 0 {
		fail(nops, "leak: goroutines %d -> %d, fds %d -> %d, shared-memory mappings left %d",
			rep.GoroutinesStart, rep.GoroutinesEnd, rep.FDsStart, rep.FDsEnd, rep.SHMMapsEnd)
	}
	return rep
}
