#!/usr/bin/env bash
# Loopback collective benchmarks (issue: broadcast, allgather, allreduce at 1 KiB, 1 MiB, 64 MiB
# with 2, 4 and 8 workers). Prints one JSON object per cell (harp bench --json).
#   scripts/bench-loopback.sh > results.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p harp-cli
H=target/release/harp
for op in broadcast allreduce allgather; do
  for w in 2 4 8; do
    for b in 1k 1m 64m; do
      reps=20; [ "$b" = 64m ] && reps=5
      $H bench "$op" --workers "$w" --bytes "$b" --reps "$reps" --json
    done
  done
done
