#!/usr/bin/env bash
# K-means against the peers (faiss-cpu, scikit-learn, scikit-learn-intelex): same data, same
# initial centroids, 10 Lloyd iterations, 2 threads each, systems interleaved; prints seconds per
# iteration, ratios and the equality check (see scripts/bench_kmeans_peers.py for definitions).
#
#   scripts/bench-kmeans-peers.sh [--harp PATH] [--shapes A,B,C] [--rounds 2] [--quick]
#                                 [--skip C:sklearnex-f64,...] [--timeout-per-system S]
#                                 [--data-dir DIR] [--jsonl FILE]
#
# The virtualenv lives outside the repo: $HARP_BENCH_VENV, default
# ${XDG_CACHE_HOME:-~/.cache}/harp-rs/bench-venv, with the pinned versions below from PyPI.
# Without --harp, harp is built here (cargo build --release -p harp-cli) and
# target/release/harp is used. Data and run directories default to target/bench-kmeans-peers/.
set -euo pipefail
cd "$(dirname "$0")/.."

PINS=(numpy==2.4.6 scipy==1.17.1 threadpoolctl==3.8.0 faiss-cpu==1.15.1 scikit-learn==1.9.1
      scikit-learn-intelex==2026.2.0)
VENV=${HARP_BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/harp-rs/bench-venv}

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
want="${PINS[*]}"
if [ "$(cat "$VENV/.harp-pins" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/pip" install -q "${PINS[@]}"
  echo "$want" > "$VENV/.harp-pins"
fi

have_harp=0
for arg in "$@"; do
  case "$arg" in --harp|--harp=*) have_harp=1 ;; esac
done
if [ "$have_harp" = 0 ]; then
  cargo build --release -q -p harp-cli
  set -- --harp target/release/harp "$@"
fi
exec "$VENV/bin/python" scripts/bench_kmeans_peers.py "$@"
