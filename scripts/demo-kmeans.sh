#!/usr/bin/env bash
# Builds harp, generates a reproducible data set and runs K-means on the embedded local cluster.
#   scripts/demo-kmeans.sh [WORKERS] [POINTS] [DIM] [K] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-4} N=${2:-200000} D=${3:-32} K=${4:-16} I=${5:-10}
cargo build --release -q -p harp-cli
H=target/release/harp
DATA=${DATA:-target/demo-data}
rm -rf "$DATA" target/demo-out
$H gen points --n "$N" --dim "$D" --seed 42 --init "$K" --files 4 --output "$DATA"
$H kmeans --workers "$W" --threads 1 --input "$DATA/points" --init "$DATA/init.txt" \
  --iterations "$I" --output target/demo-out --overwrite
echo "first centroid: $(head -c 120 target/demo-out/centroids.txt)…"
