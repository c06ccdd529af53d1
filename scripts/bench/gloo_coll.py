#!/usr/bin/env python3
"""gloo_coll.py - times one torch.distributed (gloo backend) collective with the protocol of
`harp bench` and of scripts/bench/mpi_coll.c: warm-up repetitions, then per repetition a
barrier and K back-to-back calls (--inner K); a repetition's time is the slowest rank's time
(a MAX reduce to rank 0) divided by K; rank 0 prints the median, min and max over repetitions
as one JSON line with the field names of `harp bench --json` plus "impl": "gloo".

Sizes mean what they mean in `harp bench` and mpi_coll.c (n = max(bytes // 8, 1) float64):
broadcast, reduce, allreduce: each rank's tensor is n (root 0, SUM); allgather and gather: n is
the total gathered, each rank contributes max(n // p, 1); scatter: root 0 holds n, each rank
gets max(n // p, 1); reduce-scatter: each rank holds n (p chunks of max(n // p, 1)), gets
one chunk of the sum.

One process per rank, started by scripts/bench-mpi-netns.sh in each host's namespace;
rendezvous through a TCPStore on --master:--port (rank 0 serves it).  torch uses one thread
per process (the emulated hosts share the machine's cores).
"""
import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta

OPS = {
    "bcast": "broadcast", "broadcast": "broadcast", "reduce": "reduce", "gather": "gather",
    "scatter": "scatter", "allreduce": "allreduce", "allgather": "allgather",
    "reduce_scatter": "reduce-scatter", "reduce-scatter": "reduce-scatter",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("op", choices=sorted(OPS))
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--inner", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--corrupt", type=int, default=-1,
                    help="self-test of the check: this rank alters its result, the run must fail")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--iface", default=None, help="GLOO_SOCKET_IFNAME (e.g. eth0)")
    ap.add_argument("--timeout", type=float, default=300.0, help="torch.distributed timeout, s")
    a = ap.parse_args()
    for name in ("bytes", "reps", "inner", "world"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if a.warmup < 0 or not 0 <= a.rank < a.world:
        ap.error("--warmup must be >= 0 and 0 <= --rank < --world")
    if a.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = a.iface

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://{a.master}:{a.port}", rank=a.rank,
        world_size=a.world, timeout=timedelta(seconds=a.timeout))
    op = OPS[a.op]
    r, p = a.rank, a.world
    n = max(a.bytes // 8, 1)
    share = max(n // p, 1)
    f64 = torch.float64

    def inputs():
        """This rank's buffers for one call: (input, output or list)."""
        mine = torch.full((n,), r + 1.0, dtype=f64)
        if op in ("broadcast", "reduce", "allreduce"):
            return mine, None
        if op in ("gather", "allgather"):
            src = torch.full((share,), r + 1.0, dtype=f64)
            outs = [torch.zeros(share, dtype=f64) for _ in range(p)] if (op == "allgather" or r == 0) else None
            return src, outs
        if op == "scatter":
            chunks = [torch.full((share,), j + 1.0, dtype=f64) for j in range(p)] if r == 0 else None
            return torch.zeros(share, dtype=f64), chunks
        # reduce-scatter: p chunks of n // p each
        return torch.zeros(share, dtype=f64), [torch.full((share,), r + 1.0, dtype=f64) for _ in range(p)]

    def call(buf):
        x, y = buf
        if op == "broadcast":
            dist.broadcast(x, src=0)
        elif op == "reduce":
            dist.reduce(x, dst=0, op=dist.ReduceOp.SUM)
        elif op == "allreduce":
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        elif op == "gather":
            dist.gather(x, gather_list=y, dst=0)
        elif op == "allgather":
            dist.all_gather(y, x)
        elif op == "scatter":
            dist.scatter(x, scatter_list=y, src=0)
        else:
            dist.reduce_scatter(x, y, op=dist.ReduceOp.SUM)

    if a.validate:
        buf = inputs()
        if op == "broadcast" and r != 0:
            buf[0].fill_(-1.0)
        call(buf)
        total = p * (p + 1) / 2.0
        x, y = buf
        want = None
        if op == "broadcast":
            got, want = x, torch.full_like(x, 1.0)
        elif op in ("allreduce", "reduce-scatter") or (op == "reduce" and r == 0):
            got, want = x, torch.full_like(x, total)
        elif op == "scatter":
            got, want = x, torch.full_like(x, r + 1.0)
        elif y is not None and op in ("gather", "allgather"):
            got = torch.cat(y)
            want = torch.cat([torch.full((share,), j + 1.0, dtype=f64) for j in range(p)])
        if a.corrupt == r and want is not None and got.numel() > 0:
            got = got.clone()
            got[-1] += 1.0
        bad = torch.zeros(1, dtype=f64)
        if want is not None and not torch.equal(got, want):
            i = int((got != want).nonzero()[0])
            print(f"gloo_coll: validation of {op} failed on rank {r}: element {i} is "
                  f"{float(got[i])}, expected {float(want[i])}", file=sys.stderr)
            bad.fill_(1.0)
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item() > 0:
            dist.destroy_process_group()
            sys.exit(3)

    bufs = [inputs() for _ in range(a.inner)]
    times = []
    for rep in range(a.warmup + a.reps):
        dist.barrier()
        t0 = time.perf_counter()
        for b in bufs:
            call(b)
        dt = (time.perf_counter() - t0) / a.inner
        if rep >= a.warmup:
            times.append(dt)
    tt = torch.tensor(times, dtype=f64)
    dist.reduce(tt, dst=0, op=dist.ReduceOp.MAX)
    if r == 0:
        s = sorted(tt.tolist())
        med = statistics.median(s)
        print(json.dumps({
            "impl": "gloo", "op": op, "algorithm": "default", "workers": p, "bytes": a.bytes,
            "elements": n, "reps": a.reps, "inner": a.inner, "warmup": a.warmup,
            "median_s": med, "min_s": s[0], "max_s": s[-1],
            "throughput_mb_s": a.bytes / med / 1e6, "validated": a.validate,
            "torch_version": torch.__version__,
        }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
