#!/usr/bin/env python3
"""The peer of scripts/bench-mfsgd.sh: LIBMF (PyPI `libmf`) on the same ratings files.

  bench_mfsgd.py libmf TRAIN TEST RANK LAMBDA ITERS THREADS

Runs LIBMF's training with a validation set (L2-regularised squared loss, its default
AdaGrad-scaled SGD, learning rate 0.1) and prints one JSON line per iteration:
{"iter": i, "t": seconds since the training call started, "rmse": test RMSE}. The times are
those at which LIBMF printed each iteration's line (its own per-iteration output, which it
flushes), read from a child process; reading the files is not timed.
"""
import json
import os
import subprocess
import sys
import time


def child(train, test, rank, lam, iters, threads):
    import numpy as np
    from libmf import mf
    tr = np.fromfile(train, sep=" ").reshape(-1, 3).astype(np.float32)
    te = np.fromfile(test, sep=" ").reshape(-1, 3).astype(np.float32)
    m = mf.MF(k=rank, nr_threads=threads, nr_iters=iters, lambda_p1=0.0, lambda_q1=0.0,
              lambda_p2=lam, lambda_q2=lam, quiet=False)
    print("START", len(tr), len(te), flush=True)
    m.mf_train_test(tr, te)
    sys.stdout.flush()


def main():
    mode = sys.argv[1]
    if mode == "child":
        a = sys.argv[2:]
        child(a[0], a[1], int(a[2]), float(a[3]), int(a[4]), int(a[5]))
        return
    if mode != "libmf":
        sys.exit(f"unknown mode {mode}")
    args = sys.argv[2:]
    p = subprocess.Popen([sys.executable, "-u", __file__, "child", *args], stdout=subprocess.PIPE,
                         text=True, bufsize=1)
    t0 = None
    for line in p.stdout:
        now = time.monotonic()
        f = line.split()
        if f and f[0] == "START":
            t0 = now
            print(json.dumps({"train": int(f[1]), "test": int(f[2])}), flush=True)
        elif t0 is not None and len(f) >= 3 and f[0].isdigit():
            # "iter tr_rmse va_rmse [obj]"
            print(json.dumps({"iter": int(f[0]) + 1, "t": round(now - t0, 4), "rmse": float(f[2])}),
                  flush=True)
    sys.exit(p.wait())


if __name__ == "__main__":
    main()
