#!/usr/bin/env python3
"""Measure this machine's peak double-precision matrix-multiply rate (numpy / its BLAS).

Runs C = A @ B for square n x n float64 matrices with the BLAS limited to 1 and to 2 threads,
each in its own subprocess (the thread count of OpenBLAS is fixed when it loads), and prints
JSON: {"n": ..., "reps": ..., "threads1_gflops": ..., "threads2_gflops": ..., "blas": ...}.
The best of `reps` timed runs is reported (flops = 2 n^3 per product).

Usage: scripts/peak-gemm.py [--n 2048] [--reps 5] [--threads 1,2]
"""
import argparse
import json
import os
import subprocess
import sys

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
               "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def child(n, reps):
    """Runs in the subprocess: time the products and print one JSON line."""
    import time
    import numpy as np

    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n))
    c = np.empty((n, n))
    np.matmul(a, b, out=c)  # warm-up: thread start, page faults
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
    blas = ""
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]["name"]
    except Exception:  # older numpy: no dict mode
        pass
    print(json.dumps({"gflops": 2.0 * n ** 3 / best / 1e9, "secs": best, "blas": blas}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    try:
        import numpy  # noqa: F401
    except ImportError:
        sys.exit("peak-gemm.py needs numpy: pip install numpy")
    if args.child:
        child(args.n, args.reps)
        return
    out = {"n": args.n, "reps": args.reps}
    for t in [int(x) for x in args.threads.split(",")]:
        env = dict(os.environ)
        for v in THREAD_VARS:
            env[v] = str(t)
        r = subprocess.run([sys.executable, __file__, "--child", "--n", str(args.n),
                            "--reps", str(args.reps)], env=env, check=True,
                           capture_output=True, text=True)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        out[f"threads{t}_gflops"] = round(res["gflops"], 2)
        out["blas"] = res["blas"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
