#!/bin/bash
# LDA: harp lda (1 worker x 2 threads) against tomotopy (2 threads) on the same generated corpus,
# same topics, priors and iterations; then harp with 2 and 4 workers (1 thread each) for the
# log-likelihood curves. Writes bench/lda/<commit>-tomotopy.txt.
#   scripts/bench-lda.sh [DOCS] [LENGTH] [TOPICS] [ITERATIONS]
# Defaults: 101,000 documents of 200 tokens on average (about 20.2M tokens), 20,000 words,
# 100 topics (the corpus is generated from 100), 50 iterations. Needs a release build
# (cargo build --release -p harp-cli); makes a venv with tomotopy, numpy and scipy in /tmp/lda-venv.
# With BEFORE=<another harp binary> the same runs of that binary are interleaved with these (a
# before/after comparison in one run) and the 2- and 4-worker runs are repeated with
# --rotation blocking; NAME names the result file (default tomotopy).
set -euo pipefail
DOCS=${1:-101000}
LEN=${2:-200}
K=${3:-100}
IT=${4:-50}
V=${VOCABULARY:-20000}
ALPHA=0.1
BETA=0.01
SEED=42
H=${HARP:-${CARGO_TARGET_DIR:-target}/release/harp}
D=${DATA:-/tmp/ldab}
PY=/tmp/lda-venv/bin/python
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x $PY ] || ! $PY -c 'import tomotopy, scipy, numpy' 2>/dev/null; then
  python3 -m venv /tmp/lda-venv
  /tmp/lda-venv/bin/pip install -q tomotopy scipy numpy
fi
mkdir -p $D bench/lda
C=$D/corpus-$DOCS-$LEN-$V-$K.txt
[ -s $C ] || $H gen corpus --docs $DOCS --length $LEN --vocabulary $V --topics $K --seed $SEED --output $C
commit=$(git rev-parse --short HEAD)
out=bench/lda/$commit-${NAME:-tomotopy}.txt
BEFORE=${BEFORE:-}
more=()
{
  echo "# scripts/bench-lda.sh $DOCS $LEN $K $IT at $commit ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo "corpus: $C ($(du -h $C | cut -f1)), $K topics, alpha $ALPHA, beta $BETA, $IT iterations"
  nproc; uptime
  args="--input $C --topics $K --alpha $ALPHA --beta $BETA --iterations $IT --seed $SEED"
  $H lda --workers 1 --threads 2 $args --output $D/out-w1 --overwrite > $D/harp-w1.log
  tail -2 $D/harp-w1.log
  if [ -n "$BEFORE" ]; then
    $BEFORE lda --workers 1 --threads 2 $args --output $D/out-b1 --overwrite > $D/before-w1.log
    echo "before: $(tail -2 $D/before-w1.log | head -1)"
    more+=($D/before-w1.log)
  fi
  $PY $here/bench_lda.py tomotopy $C $K $ALPHA $BETA $IT $SEED 2 > $D/tomotopy.json
  cat $D/tomotopy.json
  uptime
  $H lda --workers 2 --threads 1 $args --output $D/out-w2 --overwrite > $D/harp-w2.log
  tail -2 $D/harp-w2.log | head -1
  $H lda --workers 4 --threads 1 $args --output $D/out-w4 --overwrite > $D/harp-w4.log
  tail -2 $D/harp-w4.log | head -1
  if [ -n "$BEFORE" ]; then
    for w in 2 4; do
      $BEFORE lda --workers $w --threads 1 $args --output $D/out-b$w --overwrite > $D/before-w$w.log
      echo "before: $(tail -2 $D/before-w$w.log | head -1)"
      $H lda --workers $w --threads 1 --rotation blocking $args --output $D/out-k$w --overwrite \
        > $D/blocking-w$w.log
      echo "blocking: $(tail -2 $D/blocking-w$w.log | head -1)"
      more+=($D/before-w$w.log $D/blocking-w$w.log)
    done
  fi
  echo
  $PY $here/bench_lda.py compare $D/harp-w1.log $D/tomotopy.json $D/harp-w2.log $D/harp-w4.log "${more[@]}"
  echo
  echo "harp, 1 worker x 2 threads, log-likelihood per token by iteration:"
  grep -o "iteration .*" $D/harp-w1.log | awk '{print $2, $4, $5, $6}' | paste -sd' ' | fold -w 120
  uptime
} | tee $out
echo "wrote $out"
