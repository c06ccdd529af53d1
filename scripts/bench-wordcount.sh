#!/usr/bin/env bash
# WordCount: `harp wordcount` against Hadoop's WordCount (scripts/bench/WordCount.java: the
# classic mapper/combiner/reducer) run through Hadoop's LocalJobRunner (scripts/hadoop jar), on
# the same generated text (scripts/bench/gen_text.py: deterministic, Zipf-like vocabulary).
# Checks that both results are equal (sorted word<TAB>count lines) and prints the times.
#   scripts/bench-wordcount.sh [MB] [WORKERS] [THREADS]
# MB of text (default 256) in 8 files under $BENCH_DIR (default /tmp/harp-bench-wordcount, reused
# when present); WORKERS harp workers and LocalJobRunner map/reduce slots (default 2); THREADS
# counting threads per harp worker (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-256}
W=${2:-2}
T=${3:-1}
D=${BENCH_DIR:-/tmp/harp-bench-wordcount}
IN=$D/text-$MB
mkdir -p "$D"
if [[ ! -s $IN/part-007.txt ]]; then
  rm -rf "$IN"
  python3 scripts/bench/gen_text.py "$IN" "$MB" 8 1
fi
echo "input: $IN ($(du -sm "$IN" | cut -f1) MB, $(cat "$IN"/*.txt | wc -w) words)"

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p harp-cli
HARP=$CARGO_TARGET_DIR/release/harp
HJ=$(scripts/setup.sh | tail -n 1)
rm -rf "$D/classes" && mkdir -p "$D/classes"
javac --release 8 -nowarn -d "$D/classes" -cp "$HJ/hadoop-3.3.4/hadoop-client-api-3.3.4.jar" scripts/bench/WordCount.java
jar --create --file "$D/wordcount.jar" -C "$D/classes" .

now() { date +%s.%N; }

rm -rf "$D/out-harp"
t0=$(now)
"$HARP" wordcount --workers "$W" --threads "$T" --input "$IN" --output "$D/out-harp" --overwrite
t1=$(now)

rm -rf "$D/out-hadoop"
t2=$(now)
scripts/hadoop jar "$D/wordcount.jar" WordCount \
  -Dmapreduce.local.map.tasks.maximum="$W" -Dmapreduce.local.reduce.tasks.maximum="$W" \
  -Dmapreduce.job.reduces="$W" "$IN" "$D/out-hadoop" 2> "$D/hadoop.log"
t3=$(now)

LC_ALL=C sort "$D"/out-harp/part-* > "$D/harp.sorted"
LC_ALL=C sort "$D"/out-hadoop/part-r-* > "$D/hadoop.sorted"
if cmp -s "$D/harp.sorted" "$D/hadoop.sorted"; then
  echo "results equal: $(wc -l < "$D/harp.sorted") distinct words"
else
  echo "RESULTS DIFFER: see $D/harp.sorted and $D/hadoop.sorted" >&2
  exit 1
fi
python3 - "$t0" "$t1" "$t2" "$t3" "$W" "$T" <<'PY'
import sys
t0, t1, t2, t3 = map(float, sys.argv[1:5])
h, m = t1 - t0, t3 - t2
print(f"harp wordcount (W={sys.argv[5]}, T={sys.argv[6]}): {h:.2f} s")
print(f"Hadoop WordCount, LocalJobRunner ({sys.argv[5]} map and reduce slots): {m:.2f} s")
print(f"ratio Hadoop / harp: {m / h:.2f}")
PY
