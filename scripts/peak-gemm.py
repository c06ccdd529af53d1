#!/usr/bin/env python3
"""Measure this machine's peak double-precision matrix-multiply rate (numpy / its BLAS).

Runs C = A @ B for square n x n float64 matrices with the BLAS limited to 1 and to 2 threads,
each in its own subprocess (the thread count of OpenBLAS is fixed when it loads), and prints
JSON: {"n": ..., "reps": ..., "threads1_gflops": ..., "threads2_gflops": ..., "blas": ...}.
The best of `reps` timed runs is reported (flops = 2 n^3 per product).

OpenBLAS's kernels can be forced with OPENBLAS_CORETYPE, and some environments set it (the
development machines set OPENBLAS_CORETYPE=Haswell: AVX2 kernels, about half the AVX-512 rate
of an AVX-512 CPU). So the script runs with the inherited setting and, when the CPU has
AVX-512F, also with OPENBLAS_CORETYPE=SkylakeX, and reports the faster as the peak; every
figure is in "variants".

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
    coretypes = [None]  # None: whatever the environment says
    if has_avx512() and os.environ.get("OPENBLAS_CORETYPE", "").lower() != "skylakex":
        coretypes.append("SkylakeX")
    out = {"n": args.n, "reps": args.reps, "variants": {}}
    for t in [int(x) for x in args.threads.split(",")]:
        best = 0.0
        for ct in coretypes:
            env = dict(os.environ)
            for v in THREAD_VARS:
                env[v] = str(t)
            if ct:
                env["OPENBLAS_CORETYPE"] = ct
            r = subprocess.run([sys.executable, __file__, "--child", "--n", str(args.n),
                                "--reps", str(args.reps)], env=env, check=True,
                               capture_output=True, text=True)
            res = json.loads(r.stdout.strip().splitlines()[-1])
            out["blas"] = res["blas"]
            inherited = "inherited:" + os.environ.get("OPENBLAS_CORETYPE", "auto")
            out["variants"][f"threads{t}_{ct or inherited}"] = round(res["gflops"], 2)
            best = max(best, res["gflops"])
        out[f"threads{t}_gflops"] = round(best, 2)
    print(json.dumps(out))


def has_avx512():
    """True if /proc/cpuinfo lists avx512f (Linux x86); False elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512f" in line for line in f)
    except OSError:
        return False


if __name__ == "__main__":
    main()
