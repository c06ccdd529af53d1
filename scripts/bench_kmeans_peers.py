#!/usr/bin/env python3
"""K-means against the peers: harp vs faiss, scikit-learn and scikit-learn-intelex.

Run it through scripts/bench-kmeans-peers.sh, which makes the virtualenv (pinned versions) and
builds harp. Every system clusters the same points (the raw f32 file written by
`harp gen points --format f32`, read by the Python peers with numpy.fromfile) from the same
initial centroids, for exactly --iterations Lloyd iterations with --threads threads.

Shapes (n x d, k): A = 1,000,000 x 32, k = 256; B = 100,000 x 512, k = 1000;
C = 2,000,000 x 3, k = 10,000 (--quick: small versions of the three for a smoke test).

Initial centroids: k distinct points of the data set, drawn with a fixed seed, written to
DATA/init-k{K}.txt in decimal that parses back to the exact f32 values (so f32 and f64 systems
start from the same numbers). Not `harp gen points --init`: its centroids are uniform in the
generator's box, which leaves many clusters empty in the first iteration, and the systems treat
empty clusters differently (harp keeps the old centroid, scikit-learn and sklearnex move it to a
far point, faiss splits a large cluster), so their results could not be compared.

Seconds per iteration, the same definition for every system:
  (time at the end of iteration N - time at the end of iteration 1) / (N - 1),
i.e. the mean of iterations 2..N; loading and conversion of the data, setup and iteration 1 are
left out. Where it comes from:
  harp       mean of compute_s + comm_s over iterations 2..N in OUT/summary.json
  faiss      Kmeans.iteration_stats[i]["time"] (cumulative): (t[N-1] - t[0]) / (N - 1)
  sklearn    a timing wrapper around sklearn.cluster._kmeans.lloyd_iter_chunked_dense (one call per
             iteration; the final label-only E-step is not counted)
  sklearnex  oneDAL runs all iterations in one call: (fit(max_iter=N) - fit(max_iter=1)) / (N - 1)
Each system runs in its own process; systems are interleaved within each round
(round 1: all systems, round 2: all systems, ...) and the faster round is reported.

Equality check: the final centroids of every system are evaluated by this script in f64 (exact
nearest centroid: a k-d tree for d <= 8, f64 matrix products otherwise; then the squared
distances summed directly in f64). The reference is scikit-learn f64 (else sklearnex f64, else
harp f64, whichever ran); f64 systems must be within 1e-9 relative of it, f32 systems within
1e-5.

Output: a table on stdout and one JSON object per run / per system summary in --jsonl.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time

FULL = {
    "A": dict(n=1_000_000, d=32, k=256, seed=1),
    "B": dict(n=100_000, d=512, k=1000, seed=2),
    "C": dict(n=2_000_000, d=3, k=10_000, seed=3),
}
QUICK = {
    "A": dict(n=20_000, d=32, k=64, seed=1),
    "B": dict(n=10_000, d=512, k=200, seed=2),
    "C": dict(n=50_000, d=3, k=1000, seed=3),
}
PEERS = ["faiss-f32", "sklearn-f64", "sklearn-f32", "sklearnex-f64", "sklearnex-f32"]
F64_REFERENCE_ORDER = ["sklearn-f64", "sklearnex-f64", "harp-f64"]
TOL = {"f64": 1e-9, "f32": 1e-5}
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "BLIS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def precision_of(system):
    return system.rsplit("-", 1)[1]


# ----------------------------------------------------------------------------------------------
# Worker side: one system, one run, in its own process.
# ----------------------------------------------------------------------------------------------

def load_points(data_dir, n, d, dtype):
    import numpy as np
    pdir = os.path.join(data_dir, "points")
    files = sorted(os.listdir(pdir))
    parts = [np.fromfile(os.path.join(pdir, f), dtype="<f4") for f in files]
    x = parts[0] if len(parts) == 1 else np.concatenate(parts)
    assert x.size == n * d, f"{pdir}: {x.size} values, expected {n}*{d}"
    x = x.reshape(n, d)
    return np.ascontiguousarray(x, dtype=dtype)


def worker(a):
    import numpy as np
    system, prec = a.worker.rsplit("-", 1)
    dtype = np.float64 if prec == "f64" else np.float32
    x = load_points(a.data, a.n, a.d, dtype)
    c0 = np.loadtxt(a.init, dtype=np.float64, ndmin=2).astype(dtype)
    assert c0.shape == (a.k, a.d), c0.shape
    N = a.iterations
    res = {"system": a.worker}
    if system == "faiss":
        import faiss
        faiss.omp_set_num_threads(a.threads)
        km = faiss.Kmeans(
            a.d, a.k, niter=N, nredo=1, verbose=False, spherical=False, int_centroids=False,
            update_index=True, frozen_centroids=False, seed=1234,
            early_stop_threshold=-1.0,  # 0.0 (default) stops once the objective stops changing
            min_points_per_centroid=1, max_points_per_centroid=a.n + 1)  # no subsampling
        t0 = time.perf_counter()
        km.train(x, init_centroids=c0)
        wall = time.perf_counter() - t0
        st = km.iteration_stats
        t = [s["time"] for s in st]
        res.update(
            iterations_run=len(st), cumulative_s=t, wall_s=wall,
            own_inertia=float(st[-1]["obj"]), own_inertia_def="faiss obj of the last assignment "
            "(before the last update)", nsplit=[int(s["nsplit"]) for s in st],
            version=faiss.__version__, threads=faiss.omp_get_max_threads())
        cent = np.asarray(km.centroids, dtype=np.float64)
    elif system == "sklearn":
        from threadpoolctl import threadpool_limits
        import sklearn
        import sklearn.cluster._kmeans as skk
        from sklearn.cluster import KMeans
        orig = skk.lloyd_iter_chunked_dense
        ends, empties, overhead = [], [], [0.0]

        def timed(*args, **kw):
            r = orig(*args, **kw)
            if kw.get("update_centers", True):
                t = time.perf_counter()
                ends.append(t - overhead[0])
                # clusters left empty by this assignment (sklearn then relocates them);
                # the time of this count is taken out of the figures
                empties.append(int((np.bincount(args[5], minlength=a.k) == 0).sum()))
                overhead[0] += time.perf_counter() - t
            return r
        skk.lloyd_iter_chunked_dense = timed
        with threadpool_limits(limits=a.threads):
            km = KMeans(n_clusters=a.k, algorithm="lloyd", init=c0, n_init=1, max_iter=N,
                        tol=0.0, copy_x=True)
            t0 = time.perf_counter()
            km.fit(x)
            wall = time.perf_counter() - t0
        res.update(
            iterations_run=int(km.n_iter_), cumulative_s=[e - t0 for e in ends], wall_s=wall,
            own_inertia=float(km.inertia_), own_inertia_def="inertia_ (final centroids)",
            empty_clusters=empties, version=sklearn.__version__, threads=a.threads)
        cent = np.asarray(km.cluster_centers_, dtype=np.float64)
    elif system == "sklearnex":
        import logging
        import daal4py
        import importlib.metadata as md
        from sklearnex.cluster import KMeans
        daal4py.daalinit(a.threads)
        log = []

        class H(logging.Handler):
            def emit(self, rec):
                log.append(rec.getMessage())
        lg = logging.getLogger("sklearnex")
        lg.setLevel(logging.INFO)
        lg.addHandler(H())

        def fit(iters):
            km = KMeans(n_clusters=a.k, algorithm="lloyd", init=c0, n_init=1, max_iter=iters,
                        tol=0.0, n_jobs=a.threads)
            t0 = time.perf_counter()
            km.fit(x)
            return km, time.perf_counter() - t0
        t1 = min(fit(1)[1], fit(1)[1])  # setup + 1 iteration, the faster of two
        log.clear()
        km, tn = fit(N)
        accel = [m for m in log if "fit" in m]
        res.update(
            iterations_run=int(km.n_iter_), fit1_s=t1, fitN_s=tn, wall_s=tn,
            sec_per_iter_direct=(tn - t1) / max(1, int(km.n_iter_) - 1),
            own_inertia=float(km.inertia_), own_inertia_def="inertia_",
            dispatch=accel, accelerated=any("accelerated" in m for m in accel),
            version=md.version("scikit-learn-intelex"), threads=int(daal4py.num_threads()))
        cent = np.asarray(km.cluster_centers_, dtype=np.float64)
    else:
        raise SystemExit(f"unknown system {a.worker}")
    if "cumulative_s" in res:
        t = res["cumulative_s"]
        # over the iterations actually run (sklearn stops early when no label changes)
        res["sec_per_iter"] = (t[-1] - t[0]) / (len(t) - 1) if len(t) >= 2 else None
    else:
        res["sec_per_iter"] = res.pop("sec_per_iter_direct")
    np.save(a.centroids_out, cent)
    with open(a.result, "w") as f:
        json.dump(res, f)


# ----------------------------------------------------------------------------------------------
# Orchestrator side.
# ----------------------------------------------------------------------------------------------

def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def harp_info(harp):
    help_text = sh([harp, "kmeans", "--help"])
    try:
        version = sh([harp, "--version"]).strip()
    except subprocess.CalledProcessError:
        version = "?"
    return {"precision": "--precision" in help_text, "assign": "--assign" in help_text,
            "version": version}


def git_commit(path):
    try:
        c = sh(["git", "-C", path, "rev-parse", "--short", "HEAD"]).strip()
        dirty = sh(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"]).strip()
        return c + ("-dirty" if dirty else "")
    except Exception:
        return "?"


def ensure_data(harp, data_root, tag, s):
    """Points (harp gen points, f32, one file) and k initial centroids drawn from them."""
    import numpy as np
    d = os.path.join(data_root, f"{tag}-n{s['n']}-d{s['d']}-seed{s['seed']}")
    stamp = os.path.join(d, "done.json")
    if not os.path.exists(stamp):
        shutil.rmtree(d, ignore_errors=True)
        cmd = [harp, "gen", "points", "--n", str(s["n"]), "--dim", str(s["d"]),
               "--seed", str(s["seed"]), "--format", "f32", "--files", "1", "--output", d]
        print("+", " ".join(cmd), flush=True)
        sh(cmd)
        with open(stamp, "w") as f:
            json.dump({"gen": cmd}, f)
    init = os.path.join(d, f"init-k{s['k']}.txt")
    if not os.path.exists(init):
        x = load_points(d, s["n"], s["d"], np.float32)
        rng = np.random.default_rng(s["seed"] + 1000)
        idx = np.sort(rng.choice(s["n"], size=4 * s["k"] if 4 * s["k"] < s["n"] else s["n"],
                                 replace=False))
        _, first = np.unique(x[idx], axis=0, return_index=True)  # distinct rows only
        idx = np.sort(idx[np.sort(first)][: s["k"]])
        assert len(idx) == s["k"]
        with open(init + ".tmp", "w") as f:
            for row in x[idx]:
                # repr of the widened f32 round-trips exactly: same value in f32 and f64
                f.write(" ".join(repr(float(v)) for v in row) + "\n")
        os.replace(init + ".tmp", init)
    return d, init


def kill_tree(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_proc(cmd, env, timeout, log):
    with open(log, "w") as lf:
        p = subprocess.Popen(cmd, env=env, stdout=lf, stderr=subprocess.STDOUT,
                             start_new_session=True)
        t0 = time.perf_counter()
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(p)
            p.wait()
            return "timeout", time.perf_counter() - t0
    return rc, time.perf_counter() - t0


def run_harp(a, info, system, data, init, s, run_dir, env):
    out = os.path.join(run_dir, "out")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.harp, "kmeans", "--workers", "1", "--threads", str(a.threads),
           "--input", os.path.join(data, "points"), "--format", "f32", "--init", init,
           "--iterations", str(a.iterations), "--output", out]
    if info["precision"]:
        cmd += ["--precision", precision_of(system)]
    rc, wall = run_proc(cmd, env, a.timeout_per_system, os.path.join(run_dir, "log.txt"))
    res = {"system": system, "cmd": cmd, "wall_s": wall}
    if rc != 0:
        res["error"] = "timeout" if rc == "timeout" else f"exit {rc}"
        return res
    import numpy as np
    with open(os.path.join(out, "summary.json")) as f:
        summ = json.load(f)
    its = summ["iterations"]
    per = [i["compute_s"] + i["comm_s"] for i in its]
    N = a.iterations
    res.update(
        iterations_run=len(its), per_iter_s=per,
        sec_per_iter=sum(per[1:]) / (len(per) - 1) if len(per) >= 2 else None,
        load_s=summ.get("load_s"), own_inertia=summ.get("final_inertia"),
        own_inertia_def="inertia of the last assignment (before the last update)",
        version=info["version"], threads=summ.get("threads"))
    c = np.loadtxt(os.path.join(out, "centroids.txt"), dtype=np.float64, ndmin=2)
    np.save(os.path.join(run_dir, "centroids.npy"), c)
    return res


def run_peer(a, system, data, init, s, run_dir, env):
    rfile = os.path.join(run_dir, "result.json")
    cfile = os.path.join(run_dir, "centroids.npy")
    for f in (rfile, cfile):
        if os.path.exists(f):
            os.remove(f)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", system, "--data", data,
           "--init", init, "--n", str(s["n"]), "--d", str(s["d"]), "--k", str(s["k"]),
           "--iterations", str(a.iterations), "--threads", str(a.threads),
           "--result", rfile, "--centroids-out", cfile]
    rc, wall = run_proc(cmd, env, a.timeout_per_system, os.path.join(run_dir, "log.txt"))
    if rc != 0:
        tail = open(os.path.join(run_dir, "log.txt")).read()[-400:]
        return {"system": system, "wall_s": wall,
                "error": "timeout" if rc == "timeout" else f"exit {rc}: {tail.strip()}"}
    with open(rfile) as f:
        res = json.load(f)
    res["proc_wall_s"] = wall
    return res


def evaluate(data, s, cent, threads):
    """Exact f64 inertia of centroids `cent` on the points, and the number of empty clusters."""
    import numpy as np
    x = load_points(data, s["n"], s["d"], np.float32)
    n, d = x.shape
    k = cent.shape[0]
    labels = np.empty(n, dtype=np.int64)
    if d <= 8:
        from scipy.spatial import cKDTree
        _, labels[:] = cKDTree(cent).query(x.astype(np.float64), k=1, workers=threads)
    else:
        cn = (cent * cent).sum(1)
        step = max(1, (1 << 22) // k)
        for i in range(0, n, step):
            xb = x[i:i + step].astype(np.float64)
            labels[i:i + step] = np.argmin(cn[None, :] - 2.0 * xb @ cent.T, axis=1)
    inertia = 0.0
    step = 1 << 16
    for i in range(0, n, step):
        diff = x[i:i + step].astype(np.float64) - cent[labels[i:i + step]]
        inertia += float(np.einsum("ij,ij->", diff, diff))
    empty = int((np.bincount(labels, minlength=k) == 0).sum())
    return inertia, empty


def fmt_s(v):
    return "—" if v is None else (f"{v:.4f}" if v < 10 else f"{v:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--harp", default="target/release/harp")
    p.add_argument("--shapes", default="A,B,C")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="small shapes: a smoke test")
    p.add_argument("--systems", default=None,
                   help="comma list (default: harp-f64[,harp-f32] and all peers)")
    p.add_argument("--skip", default="",
                   help="comma list of SHAPE:SYSTEM or SYSTEM to skip, e.g. C:sklearnex-f64")
    p.add_argument("--timeout-per-system", type=float, default=900.0,
                   help="seconds for one run of one system (all iterations incl. setup); "
                        "a system that exceeds it is skipped for the rest of that shape")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--work-dir", default=None)
    p.add_argument("--jsonl", default=None)
    # worker mode (internal)
    p.add_argument("--worker")
    p.add_argument("--data")
    p.add_argument("--init")
    p.add_argument("--n", type=int)
    p.add_argument("--d", type=int)
    p.add_argument("--k", type=int)
    p.add_argument("--result")
    p.add_argument("--centroids-out")
    a = p.parse_args()
    if a.worker:
        return worker(a)
    if a.iterations < 2:
        p.error("--iterations must be at least 2 (iteration 1 is not timed)")

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = os.path.join(repo, "target", "bench-kmeans-peers")
    a.harp = os.path.abspath(a.harp)
    data_root = os.path.abspath(a.data_dir or os.path.join(base, "data"))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work = os.path.abspath(a.work_dir or os.path.join(base, "runs", stamp))
    jsonl = os.path.abspath(a.jsonl or os.path.join(base, f"results-{stamp}.jsonl"))
    os.makedirs(work, exist_ok=True)
    os.makedirs(os.path.dirname(jsonl), exist_ok=True)

    info = harp_info(a.harp)
    systems = ["harp-f64"] + (["harp-f32"] if info["precision"] else []) + PEERS
    if a.systems:
        systems = [x.strip() for x in a.systems.split(",") if x.strip()]
        unknown = [x for x in systems if x not in ["harp-f64", "harp-f32"] + PEERS]
        if unknown:
            p.error(f"unknown system(s) {unknown}; known: harp-f64, harp-f32, {', '.join(PEERS)}")
        if "harp-f32" in systems and not info["precision"]:
            print("note: this harp has no --precision; harp-f32 dropped")
            systems.remove("harp-f32")
    skips = [x.strip() for x in a.skip.split(",") if x.strip()]
    table = QUICK if a.quick else FULL
    shapes = [x.strip().upper() for x in a.shapes.split(",") if x.strip()]
    if any(x not in table for x in shapes):
        p.error(f"--shapes: choose from {','.join(table)}")

    import importlib.metadata as md
    versions = {m: md.version(m) for m in
                ("numpy", "scipy", "faiss-cpu", "scikit-learn", "scikit-learn-intelex")}
    env = dict(os.environ)
    for v in THREAD_VARS:
        env[v] = str(a.threads)
    meta = {
        "record": "meta", "utc": stamp, "host": platform.node(), "cpu_count": os.cpu_count(),
        "harp": a.harp, "harp_version": info["version"],
        "harp_mtime_utc": datetime.datetime.fromtimestamp(
            os.path.getmtime(a.harp), datetime.timezone.utc).isoformat(timespec="seconds"),
        "harp_precision_flag": info["precision"],
        "harp_assign_flag": info["assign"], "repo_commit": git_commit(repo),
        "python": platform.python_version(), "versions": versions, "threads": a.threads,
        "iterations": a.iterations, "rounds": a.rounds, "quick": a.quick,
        "thread_env": {v: env[v] for v in THREAD_VARS},
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "systems": systems, "skip": skips, "timeout_per_system": a.timeout_per_system,
    }
    out = open(jsonl, "a")

    def emit(rec):
        out.write(json.dumps(rec) + "\n")
        out.flush()
    emit(meta)
    print(f"harp {a.harp} ({info['version']}, repo {meta['repo_commit']}, "
          f"--precision {'yes' if info['precision'] else 'no'}); "
          + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"{a.threads} threads, {a.iterations} iterations, {a.rounds} interleaved rounds; "
          f"raw results: {jsonl}", flush=True)

    summaries = []
    for tag in shapes:
        s = table[tag]
        data, init = ensure_data(a.harp, data_root, tag, s)
        print(f"\n== shape {tag}: n={s['n']} d={s['d']} k={s['k']} (data {data})", flush=True)
        best, skipped, results = {}, {}, {}
        for sysname in systems:
            if sysname in skips or f"{tag}:{sysname}" in skips:
                skipped[sysname] = "--skip"
        for r in range(1, a.rounds + 1):
            for sysname in systems:
                if sysname in skipped:
                    continue
                run_dir = os.path.join(work, tag, sysname, f"round{r}")
                os.makedirs(run_dir, exist_ok=True)
                if sysname.startswith("harp-"):
                    res = run_harp(a, info, sysname, data, init, s, run_dir, env)
                else:
                    res = run_peer(a, sysname, data, init, s, run_dir, env)
                res.update(record="run", shape=tag, round=r, n=s["n"], d=s["d"], k=s["k"])
                emit(res)
                if "error" in res:
                    why = (f"timeout: > {a.timeout_per_system:g} s for one run"
                           if res["error"] == "timeout" else res["error"].splitlines()[0])
                    skipped[sysname] = f"{why}, round {r}"
                    print(f"  round {r} {sysname:14s} skipped ({skipped[sysname]})", flush=True)
                    continue
                spi = res.get("sec_per_iter")
                note = ""
                if res.get("iterations_run") != a.iterations:
                    note = (f"  converged: ran {res.get('iterations_run')} iterations "
                            "(s/iter over those)")
                if res.get("accelerated") is False:
                    note += "  NOT on oneDAL (sklearnex fell back to scikit-learn)"
                print(f"  round {r} {sysname:14s} {fmt_s(spi)} s/iter  "
                      f"(run {res['wall_s']:.1f} s){note}", flush=True)
                if spi is not None and (sysname not in best or spi < best[sysname]["sec_per_iter"]):
                    best[sysname] = res
                results[sysname] = run_dir
        # equality check
        evals = {}
        for sysname, run_dir in results.items():
            if sysname in skipped and sysname not in best:
                continue
            import numpy as np
            cent = np.load(os.path.join(run_dir, "centroids.npy"))
            evals[sysname] = evaluate(data, s, cent, a.threads)
        ref = next((x for x in F64_REFERENCE_ORDER if x in evals), None)
        peers_ok = [best[x]["sec_per_iter"] for x in best if not x.startswith("harp-")]
        fastest_peer = min(peers_ok) if peers_ok else None
        faiss_t = best.get("faiss-f32", {}).get("sec_per_iter")
        print(f"\n  shape {tag}: n={s['n']} d={s['d']} k={s['k']}; s/iter = faster of "
              f"{a.rounds} rounds; inertia of the final centroids (f64, exact); "
              f"reference {ref or 'none'}")
        hdr = (f"  {'system':14s} {'iters':>5s} {'s/iter':>9s} {'x faiss':>8s} {'x fastest peer':>15s} "
               f"{'inertia':>22s} {'rel. diff':>9s} {'check':>6s}")
        print(hdr)
        for sysname in systems:
            if sysname not in best:
                why = skipped.get(sysname, "no result")
                print(f"  {sysname:14s} skipped ({why})")
                summaries.append({"record": "summary", "shape": tag, "system": sysname,
                                  "skipped": why})
                continue
            spi = best[sysname]["sec_per_iter"]
            inertia, empty = evals[sysname]
            rel = None
            ok = None
            if ref:
                rel = abs(inertia - evals[ref][0]) / evals[ref][0]
                ok = rel <= TOL[precision_of(sysname)]
            rx = spi / faiss_t if faiss_t else None
            rp = spi / fastest_peer if fastest_peer else None
            print(f"  {sysname:14s} {best[sysname].get('iterations_run', '?'):>5} "
                  f"{fmt_s(spi):>9s} "
                  f"{'—' if rx is None else f'{rx:.2f}':>8s} "
                  f"{'—' if rp is None else f'{rp:.2f}':>15s} {inertia:22.15e} "
                  f"{'—' if rel is None else f'{rel:.1e}':>9s} "
                  f"{'—' if ok is None else ('ok' if ok else 'DIFF'):>6s}"
                  + (f"  ({empty} empty clusters at the end)" if empty else ""))
            rec = {"record": "summary", "shape": tag, "system": sysname, "n": s["n"],
                   "d": s["d"], "k": s["k"], "iterations_run": best[sysname].get(
                       "iterations_run"), "sec_per_iter": spi, "ratio_to_faiss": rx,
                   "ratio_to_fastest_peer": rp, "inertia_f64": inertia,
                   "empty_clusters_final": empty, "reference": ref, "rel_diff": rel,
                   "tolerance": TOL[precision_of(sysname)], "equal": ok,
                   "own_inertia": best[sysname].get("own_inertia"),
                   "rounds": [x for x in range(1, a.rounds + 1)]}
            if sysname in skipped:
                rec["note"] = skipped[sysname]
            summaries.append(rec)
            emit(rec)
        for rec in summaries:
            if rec.get("skipped") and rec["shape"] == tag:
                emit(rec)
    out.close()
    bad = [r for r in summaries if r.get("equal") is False]
    print(f"\nraw results: {jsonl}")
    if bad:
        print("equality check FAILED for: "
              + ", ".join(f"{r['shape']}:{r['system']}" for r in bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
