#!/usr/bin/env python3
"""Helper of scripts/bench-mds.sh.

  bench_mds.py init N DIM SEED FILE          uniform [0,1) initial coordinates, text, full precision
  bench_mds.py sklearn DIST N INIT IT OUT    times sklearn.manifold.smacof (metric, eps=0, n_init=1,
                                             the given init) with max_iter=1 and max_iter=IT; writes
                                             OUT.json (seconds per iteration = (t_IT - t_1)/(IT - 1),
                                             final stress) and OUT.coords
  bench_mds.py report RESULTS.jsonl          the table (medians over repetitions) and harp/sklearn ratios
"""
import json
import statistics
import sys
import time


def init(n, dim, seed, path):
    import numpy as np
    x = np.random.RandomState(seed).uniform(size=(n, dim))
    with open(path, "w") as f:
        for row in x:
            f.write(" ".join(repr(float(v)) for v in row) + "\n")


def run_sklearn(dist, n, init_path, it, out):
    import numpy as np
    from sklearn.manifold import smacof
    d = np.fromfile(dist, dtype="<f8").reshape(n, n)
    x0 = np.loadtxt(init_path, ndmin=2)
    times = {}
    for m in (1, it):
        t0 = time.perf_counter()
        x, stress, n_iter = smacof(d, metric=True, n_components=x0.shape[1], init=x0.copy(),
                                   n_init=1, max_iter=m, eps=0.0, return_n_iter=True,
                                   normalized_stress=False)
        times[m] = time.perf_counter() - t0
        assert n_iter == m, f"sklearn stopped after {n_iter} of {m} iterations"
    np.savetxt(out + ".coords", x, fmt="%.17g")
    json.dump({"seconds_per_iteration": (times[it] - times[1]) / (it - 1),
               "total_s": times[it], "final_stress": float(stress)}, open(out + ".json", "w"))


def report(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    keys = []
    for r in rows:
        k = (r["n"], r["tool"], r["workers"], r["threads"])
        if k not in keys:
            keys.append(k)
    med = {k: statistics.median(r["s_it"] for r in rows
                                if (r["n"], r["tool"], r["workers"], r["threads"]) == k) for k in keys}
    print("| N | tool | workers × threads | s/iteration (median) | runs | final stress | harp/sklearn (same cores) |")
    print("|---|---|---|---|---|---|---|")
    for k in keys:
        n, tool, w, t = k
        runs = [r for r in rows if (r["n"], r["tool"], r["workers"], r["threads"]) == k]
        ratio = ""
        if tool == "harp":
            cores = w * t
            sk = med.get((n, "sklearn", 1, cores))
            if sk:
                ratio = f"{med[k] / sk:.3f} (vs sklearn {cores} thread{'s' if cores > 1 else ''})"
        stress = runs[-1]["final_stress"]
        extra = ""
        if "stress_rel_diff" in runs[-1]:
            extra = f" (rel. diff {runs[-1]['stress_rel_diff']:.1e}, coords {runs[-1]['coords_rel_diff']:.1e})"
        print(f"| {n} | {tool} | {w} × {t} | {med[k]:.4f} | {len(runs)} | {stress:.9e}{extra} | {ratio} |")


def compare(harp_coords, sk_coords):
    import numpy as np
    a, b = np.loadtxt(harp_coords, ndmin=2), np.loadtxt(sk_coords, ndmin=2)
    return float(abs(a - b).max() / abs(b).max())


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "init":
        init(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif cmd == "sklearn":
        run_sklearn(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6])
    elif cmd == "compare":
        print(compare(sys.argv[2], sys.argv[3]))
    elif cmd == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)
