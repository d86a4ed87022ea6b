package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/launch/etcdrdzv/etcdtest"
)

// etcdWorker is the worker of TestEtcdRendezvous: it joins the group the rendezvous
// described and all-reduces its rank+1. On the first try node 1's worker fails right after
// joining, as a crashing node would.
func etcdWorker() {
	ctx := context.Background()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(20*time.Second), comm.WithConnectTimeout(20*time.Second))
	if err != nil {
		fmt.Println("init:", err)
		os.Exit(1)
	}
	if os.Getenv("GROUP_RANK") == "1" && os.Getenv("TORCHELASTIC_RESTART_COUNT") == "0" {
		fmt.Println("node 1 crashing")
		os.Exit(7)
	}
	b := comm.F64{float64(g.Rank() + 1)}
	if err := g.AllReduce(b, comm.Sum).Wait(ctx); err != nil {
		fmt.Println("all-reduce:", err)
		os.Exit(1)
	}
	fmt.Printf("restart %s sum %v via %s\n", os.Getenv("TORCHELASTIC_RESTART_COUNT"), b[0], comm.TransportOf(g))
	g.Close(ctx)
}

// Two gprun "nodes" (one worker each) rendezvous through a local etcd; node 1's worker dies,
// which ends the round for both nodes, and the new round completes the all-reduce.
func TestEtcdRendezvous(t *testing.T) {
	ep := etcdtest.Start(t)
	t.Setenv("GPRUN_TEST_ETCD_WORKER", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	outs := make([]bytes.Buffer, 2)
	codes := make([]int, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = run(ctx, []string{"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "etcd",
				"--rdzv-endpoint", ep, "--rdzv-host", "127.0.0.1", "--run-id", "etcdtest", "--max-restarts", "2",
				"--", os.Args[0], "-test.run=^$"}, &outs[i], &outs[i], nil)
		}()
	}
	wg.Wait()
	for i := range 2 {
		out := outs[i].String()
		if codes[i] != 0 || !strings.Contains(out, "restart 1 sum 3 via tcp") || !strings.Contains(out, "rendezvous round 1:") {
			t.Errorf("node %d: exit %d, want 0, a second round and the sum 3 after one restart; output:\n%s", i, codes[i], out)
		}
	}
	t.Logf("node 0:\n%s\nnode 1:\n%s", outs[0].String(), outs[1].String())
}
