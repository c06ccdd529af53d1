#!/usr/bin/env bash
# `harp mds` (SMACOF, unit weights: the Guttman transform) against scikit-learn's
# sklearn.manifold.smacof on the same N×N Euclidean distance matrix (`harp gen dist`, points in
# 3-D, embedded in 2-D), the same initial coordinates and the same number of iterations, runs
# interleaved per repetition: sklearn 1 thread, harp 1×1, sklearn 2 threads, harp 1×2, harp 2×1.
#   scripts/bench-mds.sh [SIZES] [ITERATIONS] [REPS]        (defaults "4000 6000" 20 2)
#   VENV=/tmp/venv-mds BENCH_DIR=target/bench-mds
# Seconds per iteration: harp from summary.json (the iteration loop: compute + communication);
# sklearn as (t(max_iter=IT) − t(max_iter=1)) / (IT − 1), so its set-up (symmetry check, first
# distances) is not counted. sklearn's threads are its BLAS threads (OPENBLAS/OMP/MKL_NUM_THREADS).
# Both final stresses are σ of the final coordinates, Σ_{i<j} (δ_ij − d_ij)²; the table gives their
# relative difference and the largest coordinate difference relative to the largest coordinate.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${1:-"4000 6000"}
IT=${2:-20}
REPS=${3:-2}
VENV=${VENV:-/tmp/venv-mds}
HARP=target/release/harp
B=${BENCH_DIR:-target/bench-mds}
[[ -x $HARP ]] || { echo "build first: cargo build --release" >&2; exit 2; }
if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q scikit-learn numpy
fi
PY="$VENV/bin/python scripts/bench_mds.py"
mkdir -p "$B"
RES=$B/results.jsonl
: > "$RES"
$VENV/bin/python -c 'import sklearn, numpy; print("scikit-learn", sklearn.__version__, "numpy", numpy.__version__)'
for N in $SIZES; do
  D=$B/d$N.f64
  [[ -f $D ]] || $HARP gen dist --n "$N" --dim 3 --seed 7 --format f64 --output "$D" > /dev/null
  [[ -f $B/init$N.txt ]] || $PY init "$N" 2 3 "$B/init$N.txt"
  for rep in $(seq "$REPS"); do
    for run in sk1 h11 sk2 h12 h21; do
      case $run in
        sk*)
          T=${run#sk}
          OUT=$B/sk$N-$T
          OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T MKL_NUM_THREADS=$T \
            $PY sklearn "$D" "$N" "$B/init$N.txt" "$IT" "$OUT"
          $VENV/bin/python - "$OUT.json" "$N" "$T" >> "$RES" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"n": int(sys.argv[2]), "tool": "sklearn", "workers": 1, "threads": int(sys.argv[3]),
                  "s_it": r["seconds_per_iteration"], "final_stress": r["final_stress"]}))
PYEOF
          ;;
        h*)
          W=${run:1:1}; T=${run:2:1}
          OUT=$B/harp$N-$W-$T
          $HARP mds --workers "$W" --threads "$T" --input "$D" --format f64 --dim 2 \
            --iterations "$IT" --init "$B/init$N.txt" --output "$OUT" --overwrite > /dev/null
          CD=$($PY compare "$OUT/coords.txt" "$B/sk$N-1.coords")
          $VENV/bin/python - "$OUT/summary.json" "$B/sk$N-1.json" "$N" "$W" "$T" "$CD" >> "$RES" <<'PYEOF'
import json, sys
s, k = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(json.dumps({"n": int(sys.argv[3]), "tool": "harp", "workers": int(sys.argv[4]),
                  "threads": int(sys.argv[5]), "s_it": s["seconds_per_iteration"],
                  "comm_s_it": s["comm_s_per_iteration"], "final_stress": s["final_stress"],
                  "stress_rel_diff": abs(s["final_stress"] - k["final_stress"]) / k["final_stress"],
                  "coords_rel_diff": float(sys.argv[6])}))
PYEOF
          ;;
      esac
      tail -1 "$RES"
    done
  done
done
$PY report "$RES"
