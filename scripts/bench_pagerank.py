#!/usr/bin/env python3
"""PageRank benchmark helpers for scripts/bench-pagerank.sh (numpy, scipy).

  gen OUT EDGES VERTICES SEED   a deterministic power-law-ish edge list: `src dst` lines
  scipy INPUT ITERATIONS DAMPING HARP_OUT
                                 PageRank by sparse power iteration (the transpose of the
                                 CSR adjacency times a vector) with harp's rules, timed; compares
                                 the ranks with harp's part files in HARP_OUT; prints JSON.
"""
import glob
import json
import sys
import time

import numpy as np


def gen(out, m, n, seed):
    rng = np.random.default_rng(seed)
    # Skewed ids: u^3 puts most endpoints on few vertices (in-degree heavier than out-degree),
    # then a fixed permutation spreads the popular ids over the id range; ids are sparse
    # (multiplied by 7, plus an offset).
    perm = rng.permutation(n).astype(np.int64)
    src = perm[(n * rng.random(m) ** 2).astype(np.int64)]
    dst = perm[(n * rng.random(m) ** 3).astype(np.int64)]
    src = src * 7 + 11
    dst = dst * 7 + 11
    with open(out, "w") as f:
        step = 1 << 20
        for a in range(0, m, step):
            s = src[a:a + step]
            d = dst[a:a + step]
            f.write("\n".join(f"{x} {y}" for x, y in zip(s.tolist(), d.tolist())))
            f.write("\n")


def scipy_pagerank(path, iterations, damping, harp_out):
    import scipy.sparse as sp

    t0 = time.perf_counter()
    with open(path, "rb") as f:
        data = np.array(f.read().split(), dtype=np.int64)
    src, dst = data[0::2], data[1::2]
    ids, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    n, m = len(ids), len(src)
    s, d = inv[:m], inv[m:]
    outdeg = np.bincount(s, minlength=n).astype(np.float64)
    # A[u, v] = number of edges u -> v (duplicates summed); AT = A transposed, in CSR.
    a = sp.csr_matrix((np.ones(m), (s, d)), shape=(n, n))
    at = a.T.tocsr()
    dangling = outdeg == 0
    inv_out = np.where(dangling, 0.0, 1.0 / np.maximum(outdeg, 1.0))
    load_s = time.perf_counter() - t0

    r = np.full(n, 1.0 / n)
    t1 = time.perf_counter()
    for _ in range(iterations):
        dsum = r[dangling].sum()
        r = (1.0 - damping) / n + damping * (at @ (r * inv_out) + dsum / n)
    iter_s = time.perf_counter() - t1

    got = {}
    for part in sorted(glob.glob(f"{harp_out}/part-*")):
        with open(part) as f:
            for line in f:
                v, x = line.split("\t")
                got[int(v)] = float(x)
    hv = np.array(list(got.keys()), dtype=np.int64)
    hr = np.array(list(got.values()))
    order = np.argsort(hv)
    hv, hr = hv[order], hr[order]
    same_ids = len(hv) == n and bool(np.all(hv == ids))
    rel = float(np.max(np.abs(hr - r) / np.abs(r))) if same_ids else float("nan")
    print(json.dumps({
        "vertices": int(n),
        "edges": int(m),
        "load_s": load_s,
        "iterations_s": iter_s,
        "per_iteration_s": iter_s / max(iterations, 1),
        "total_s": load_s + iter_s,
        "same_vertices": same_ids,
        "max_rel_diff": rel,
    }))


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "scipy":
        scipy_pagerank(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)
