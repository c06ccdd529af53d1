#!/usr/bin/env python3
"""tomotopy's collapsed Gibbs LDA on a `doc_id word word ...` corpus, for scripts/bench-lda.sh.

  bench_lda.py tomotopy CORPUS TOPICS ALPHA BETA ITERATIONS SEED THREADS  -> one JSON line
  bench_lda.py compare HARP_W1_LOG TOMOTOPY_JSON [HARP_LOG ...]            -> the tables

The joint log-likelihood log p(w, z) per token is computed from tomotopy's final topic
assignments with the formula harp lda prints (docs/lda.md), and tomotopy's own ll_per_word is
reported next to it.
"""
import json
import re
import sys
import time


def tomotopy_run(corpus, k, alpha, beta, iterations, seed, threads):
    import numpy as np
    import tomotopy as tp
    from scipy.special import gammaln

    t0 = time.time()
    mdl = tp.LDAModel(k=k, alpha=alpha, eta=beta, seed=seed, min_cf=0, rm_top=0)
    mdl.optim_interval = 0  # symmetric, fixed alpha as in harp lda
    mdl.burn_in = 0
    with open(corpus) as f:
        for line in f:
            fields = line.split()
            if fields:
                mdl.add_doc(fields[1:])
    mdl.train(0, workers=threads)  # initialises the topics
    load_s = time.time() - t0
    t1 = time.time()
    mdl.train(iterations, workers=threads)
    train_s = time.time() - t1
    words = np.concatenate([np.asarray(d.words, dtype=np.int64) for d in mdl.docs])
    topics = np.concatenate([np.asarray(d.topics, dtype=np.int64) for d in mdl.docs])
    lens = np.array([len(d.words) for d in mdl.docs], dtype=np.int64)
    d = len(lens)
    v = len(mdl.used_vocabs)
    n = int(lens.sum())
    doc = np.repeat(np.arange(d, dtype=np.int64), lens)
    ndk = np.bincount(doc * k + topics, minlength=d * k)
    nkw = np.bincount(topics * v + words, minlength=k * v)
    nk = np.bincount(topics, minlength=k)
    ll = (d * gammaln(k * alpha) - gammaln(lens + k * alpha).sum()
          + (gammaln(ndk + alpha) - gammaln(alpha)).sum()
          + k * gammaln(v * beta) - gammaln(nk + v * beta).sum()
          + (gammaln(nkw + beta) - gammaln(beta)).sum())
    return dict(tokens=n, docs=d, vocabulary=v, topics=k, iterations=iterations, threads=threads,
                load_s=round(load_s, 3), train_s=round(train_s, 3),
                tokens_per_s=n * iterations / train_s, ll_per_token=ll / n,
                tomotopy_ll_per_word=mdl.ll_per_word, version=tp.__version__,
                isa=getattr(tp, "isa", "?"))


def harp_log(path):
    text = open(path).read()
    curve = [float(x) for x in re.findall(r"loglik/token (-?[\d.]+)  ", text)]
    m = re.search(r"iterations ([\d.]+) s \(([\d.]+) tokens/s\), final loglik/token (-?[\d.]+)", text)
    return dict(curve=curve, iterations_s=float(m[1]), tokens_per_s=float(m[2]), ll=float(m[3]))


def compare(args):
    h = harp_log(args[0])
    t = json.load(open(args[1]))
    print("| 1 worker x 2 threads | tokens/s | final log-likelihood per token | sampling s |")
    print("|---|---|---|---|")
    print(f"| harp lda | {h['tokens_per_s']:.4g} | {h['ll']:.6f} | {h['iterations_s']:.2f} |")
    print(f"| tomotopy {t['version']} ({t['isa']}) | {t['tokens_per_s']:.4g} | {t['ll_per_token']:.6f} "
          f"(its ll_per_word {t['tomotopy_ll_per_word']:.6f}) | {t['train_s']:.2f} |")
    rel = abs(h['ll'] - t['ll_per_token']) / abs(t['ll_per_token'])
    print(f"| harp / tomotopy | {h['tokens_per_s'] / t['tokens_per_s']:.2f} | "
          f"difference {100 * rel:.2f} % | |")
    if len(args) > 2:
        base = h['curve']
        print()
        print("| run | final log-likelihood per token | tokens/s | largest difference from the "
              "1-worker curve, iterations 1-N | from iteration 10 |")
        print("|---|---|---|---|---|")
        for p in args[2:]:
            o = harp_log(p)
            diffs = [abs(a - b) / abs(b) for a, b in zip(o['curve'], base)]
            late = diffs[9:] or diffs
            print(f"| {p.rsplit('/', 1)[-1]} | {o['ll']:.6f} | {o['tokens_per_s']:.4g} | "
                  f"{100 * max(diffs):.2f} % | {100 * max(late):.2f} % |")


if __name__ == "__main__":
    if sys.argv[1] == "tomotopy":
        c, k, a, b, it, seed, th = sys.argv[2:9]
        print(json.dumps(tomotopy_run(c, int(k), float(a), float(b), int(it), int(seed), int(th))))
    elif sys.argv[1] == "compare":
        compare(sys.argv[2:])
    else:
        sys.exit(__doc__)
