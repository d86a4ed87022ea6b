"""torch.distributed gloo side of `make bench-comm`: run as one rank (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT from the environment). Rank 0 prints one JSON line per (op, bytes):
{"op", "world", "bytes", "latency_s"} with latency the median over GP_BENCH_REPS timed runs of
the slowest rank's mean per iteration, or "error" when gloo does not support the op. Sizes and
iteration counts come from argv as `bytes:iters` pairs, the same the Go side uses."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    plan = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]]
    ops = os.environ.get("GP_BENCH_OPS", "all-reduce,reduce-scatter,all-gather,broadcast")
    reps = int(os.environ.get("GP_BENCH_REPS", "1"))
    for op in ops.split(","):
        for nbytes, iters in plan:
            count = nbytes // 4
            count -= count % world
            shard = count // world
            try:
                if op == "all-reduce":
                    t = torch.ones(count)
                    fn = lambda: dist.all_reduce(t)
                elif op == "reduce-scatter":
                    ins = [torch.ones(shard) for _ in range(world)]
                    out = torch.empty(shard)
                    fn = lambda: dist.reduce_scatter(out, ins)
                elif op == "all-gather":
                    src = torch.ones(shard)
                    outs = [torch.empty(shard) for _ in range(world)]
                    fn = lambda: dist.all_gather(outs, src)
                else:
                    t = torch.ones(count)
                    fn = lambda: dist.broadcast(t, 0)
                fn()
                lats = []
                for _ in range(reps):
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        fn()
                    lat = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
                    dist.all_reduce(lat, op=dist.ReduceOp.MAX)
                    lats.append(lat.item())
                lats.sort()
                row = {"op": op, "world": world, "bytes": nbytes, "latency_s": lats[len(lats) // 2]}
            except Exception as e:  # gloo in torch 1.13 lacks reduce_scatter
                row = {"op": op, "world": world, "bytes": nbytes, "error": str(e).splitlines()[0][:120]}
            if rank == 0:
                print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
