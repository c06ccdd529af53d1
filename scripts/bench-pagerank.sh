#!/bin/bash
# PageRank: harp pagerank (W workers x 1 thread, loopback) against scipy sparse power iteration
# on the same generated graph, same iterations, same dangling rule; checks that the ranks agree.
#   scripts/bench-pagerank.sh [EDGES] [VERTICES] [ITERATIONS] [WORKERS]
# Defaults: 5,000,000 edges, 1,000,000 vertices, 20 iterations, 2 workers. Needs a release build
# (cargo build --release -p harp-cli) and makes a venv with scipy/numpy in /tmp/venv-pr.
set -euo pipefail
M=${1:-5000000}
N=${2:-1000000}
IT=${3:-20}
W=${4:-2}
H=${HARP:-${CARGO_TARGET_DIR:-target}/release/harp}
D=${DATA:-/tmp/prb}
PY=/tmp/venv-pr/bin/python
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x $PY ] || ! $PY -c 'import scipy, numpy' 2>/dev/null; then
  python3 -m venv /tmp/venv-pr
  /tmp/venv-pr/bin/pip install -q scipy numpy
fi
mkdir -p $D
G=$D/graph-$M-$N.txt
[ -s $G ] || $PY $here/bench_pagerank.py gen $G $M $N 42
echo "graph: $G ($(du -h $G | cut -f1)), $IT iterations, harp with $W workers x 1 thread"
uptime
t0=$(date +%s.%N)
$H pagerank --workers $W --threads 1 --input $G --iterations $IT --output $D/out --overwrite > $D/harp.log
t1=$(date +%s.%N)
tail -2 $D/harp.log
wall=$(echo "$t1 - $t0" | bc)
# The same run with key-value messages every iteration (keys encoded, sorted and merged).
$H pagerank --workers $W --threads 1 --input $G --iterations $IT --messages kv --output $D/out-kv --overwrite > $D/harp-kv.log
tail -2 $D/harp-kv.log | head -1
cmp -s <(cat $D/out/part-*) <(cat $D/out-kv/part-*) && echo "compiled and kv ranks: identical" || { echo "compiled and kv ranks differ"; exit 1; }
$PY $here/bench_pagerank.py scipy $G $IT 0.85 $D/out > $D/scipy.json
cat $D/scipy.json
$PY - "$D/harp.log" "$D/scipy.json" "$wall" "$D/harp-kv.log" <<'PYEOF'
import json, re, sys
def times(path):
    m = re.search(r"load ([\d.]+) s, iterations ([\d.]+) s \(([\d.]+) s each\), total ([\d.]+) s", open(path).read())
    return dict(load_s=float(m[1]), iterations_s=float(m[2]), per_iteration_s=float(m[3]), total_s=float(m[4]))
h = times(sys.argv[1])
kv = times(sys.argv[4])
s = json.load(open(sys.argv[2]))
wall = float(sys.argv[3])
print(f"| | load s | per iteration s | iterations s | total s |")
print(f"|---|---|---|---|---|")
print(f"| harp | {h['load_s']:.3f} | {h['per_iteration_s']:.4f} | {h['iterations_s']:.3f} | {h['total_s']:.3f} (wall {wall:.3f}) |")
print(f"| harp --messages kv | {kv['load_s']:.3f} | {kv['per_iteration_s']:.4f} | {kv['iterations_s']:.3f} | {kv['total_s']:.3f} |")
print(f"| scipy | {s['load_s']:.3f} | {s['per_iteration_s']:.4f} | {s['iterations_s']:.3f} | {s['total_s']:.3f} |")
print(f"| harp / scipy | {h['load_s']/s['load_s']:.2f} | {h['per_iteration_s']/s['per_iteration_s']:.2f} | {h['iterations_s']/s['iterations_s']:.2f} | {h['total_s']/s['total_s']:.2f} |")
print(f"same vertices: {s['same_vertices']}, max relative difference: {s['max_rel_diff']:.3e}")
if not s['same_vertices'] or not s['max_rel_diff'] <= 1e-9:
    sys.exit("ranks disagree")
PYEOF
uptime
