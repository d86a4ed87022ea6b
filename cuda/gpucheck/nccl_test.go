package gpucheck

import (
	"context"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

// NCCL collectives at world 1 on the real library: the backend's staging, streams and id
// exchange through the store, and the device-resident all-reduce.
func TestNCCLWorld1(t *testing.T) {
	d := device(t)
	need(t, "loading NCCL", libnccl.Load())
	v, _ := libnccl.Version()
	t.Logf("NCCL %d from %s", v, libnccl.LibraryPath())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := store.Listen("127.0.0.1:0", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st, err := store.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g, err := nccl.New(ctx, st, 0, 1, nccl.WithDevice(d.Ordinal()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	buf := comm.F32{1, 2, 3}
	i64 := comm.I64{5, -3}
	dst := make(comm.F32, 3)
	rs := make(comm.F32, 3)
	for name, w := range map[string]comm.Work{
		"all-reduce": g.AllReduce(buf, comm.Sum), "avg int64": g.AllReduce(i64, comm.Avg),
		"broadcast": g.Broadcast(buf, 0), "all-gather": g.AllGather(dst, comm.F32{7, 8, 9}),
		"reduce-scatter": g.ReduceScatter(rs, comm.F32{4, 5, 6}, comm.Max), "barrier": g.Barrier(),
	} {
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if buf[2] != 3 || i64[0] != 5 || dst[1] != 8 || rs[2] != 6 {
		t.Fatalf("world-1 collectives changed values: %v %v %v %v", buf, i64, dst, rs)
	}
	x := upload(t, d, []float32{1, 2, 3, 4}, 4)
	if err := d.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.AllReduceDevice(driver.DevPtr(x.Ptr()), 4, libnccl.Float32, comm.Sum).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := x.ToHost(ctx)
	if err != nil || got[3] != 4 {
		t.Fatalf("device all-reduce: %v %v", got, err)
	}
}
