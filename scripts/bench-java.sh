#!/usr/bin/env bash
# Java API vs the harp tool on the same number of workers (loopback): allreduce and broadcast at
# 1, 16 and 64 MiB. Prints one JSON line per measurement and a table of the ratios.
#   scripts/bench-java.sh [WORKERS] [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-4} R=${2:-10}
java/build.sh >/dev/null
H=target/release/harp
out=$(mktemp)
for op in allreduce broadcast; do
  for b in 1048576 16777216 67108864; do
    $H bench "$op" --workers "$W" --bytes "$b" --reps "$R" --json | sed 's/^{/{"api":"harp",/' | tee -a "$out"
    scripts/hadoop jar target/java/harp-rs-examples.jar bench -Dmapreduce.framework.name=map-collective \
      -Dmapreduce.jobtracker.staging.root.dir="${TMPDIR:-/tmp}/harp-bench-staging" "$op" "$b" "$W" "$R" 2>/dev/null \
      | grep '^{' | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| op | bytes | workers | harp bench median | Java API median | Java / harp |")
print("|---|---|---|---|---|---|")
for i in range(0, len(rows), 2):
    h, j = rows[i], rows[i + 1]
    print(f"| {h['op']} | {h['bytes'] >> 20} MiB | {h['workers']} | {h['median_s']*1e3:.2f} ms | {j['median_s']*1e3:.2f} ms | {j['median_s']/h['median_s']:.3f} |")
PY
rm -f "$out"
