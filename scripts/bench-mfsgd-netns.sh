#!/bin/bash
# MF-SGD's overlap: pipelined rotation against `--rotation blocking` on 4 emulated hosts
# (scripts/netns-cluster.sh, one network namespace per worker, RATE per host and direction).
# Needs root, iproute2 and a release build (cargo build --release -p harp-cli).
#   scripts/bench-mfsgd-netns.sh [RATINGS] [USERS] [ITEMS] [RANK] [EPOCHS] [REPS]
# Defaults: 1,000,000 ratings, 200,000 users, 100,000 items (power-law, skew 2, true rank 16,
# noise 0.5, no test file), rank 16, 6 epochs, 3 repetitions of each mode, alternated.
# Environment: RATE (tc syntax, 200mbit), PREFIX (namespace prefix, mf), DATA (/tmp/mfn),
# HARP (the binary), THREADS (compute threads per worker, 1), BLOCKS (--blocks, 8).
# First one rotate of a slice-sized table is timed on the hosts (`harp bench rotate`): the
# communication alone. Per run: the master's epoch seconds (updates and rotations, no test
# pass). Every mode also runs once with the 4 workers on this host's loopback (`harp mfsgd
# --workers 4`, no shaping): the computation. Prints one line per run and a summary (mean of
# epochs 2…EPOCHS over the repetitions).
set -euo pipefail
R=${1:-1000000} U=${2:-200000} I=${3:-100000} RANK=${4:-16} E=${5:-6} REPS=${6:-3}
RATE=${RATE:-200mbit}
P=${PREFIX:-mf}
T=${THREADS:-1}
B=${BLOCKS:-8}
W=4
here=$(cd "$(dirname "$0")" && pwd)
H=$(realpath "${HARP:-${CARGO_TARGET_DIR:-$here/../target}/release/harp}")
D=${DATA:-/tmp/mfn}
NC=$here/netns-cluster.sh
mkdir -p "$D"
TR=$D/train-$R-$U-$I.txt
[ -s "$TR" ] || "$H" gen ratings --ratings "$R" --users "$U" --items "$I" --rank 16 --noise 0.5 \
  --skew 2 --test-fraction 0 --seed 7 --output "$TR" --test "$D/empty-test.txt" >/dev/null
echo "ratings: $TR ($(wc -l <"$TR") lines), $W workers x $T threads, rank $RANK, blocks $B, $E epochs, $RATE"
slice=$(awk -v i="$I" -v k="$RANK" -v w=$W 'BEGIN { printf "%.0f", i / (2 * w) * k * 4 }')
echo "one slice: about $slice bytes; per epoch and worker $((2 * W)) rotates"
export HARP_SECRET=${HARP_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
"$NC" up $W --rate "$RATE" --prefix "$P" >/dev/null
trap '"$NC" down --prefix "$P" >/dev/null 2>&1 || true' EXIT
uptime
common=(mfsgd --input "$TR" --rank "$RANK" --epochs "$E" --threads "$T" --blocks "$B" --overwrite)
n=0
netns_run() { # mode log
  n=$((n + 1))
  local hosts=$D/hosts-$n pids=() i
  "$NC" hosts --prefix "$P" --port $((21000 + (n % 500) * 8)) >"$hosts"
  for ((i = 0; i < W; i++)); do
    timeout -k 5 900 ip netns exec "${P}h$i" "$H" worker --hosts "$hosts" --rank $i --job "mf$$-$n" \
      "${common[@]}" --rotation "$1" --output "$D/out-net" >"$2.r$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  cp "$2.r0" "$2"
}
epochs() { # log: the epoch seconds after the first, mean
  awk '/^epoch/ { n++; if (n > 1) { s += $3; c++ } } END { printf "%.4f", s / c }' "$1"
}
# The communication alone: one rotate of a slice-sized table on the same hosts (`harp bench`).
n=$((n + 1))
"$NC" hosts --prefix "$P" --port $((21000 + (n % 500) * 8)) >"$D/hosts-$n"
pids=()
for ((i = 0; i < W; i++)); do
  timeout -k 5 300 ip netns exec "${P}h$i" "$H" worker --hosts "$D/hosts-$n" --rank $i --job "mf$$-$n" \
    bench rotate --bytes "$slice" --reps 10 --json >"$D/rotate.r$i" 2>&1 &
  pids+=($!)
done
for i in "${pids[@]}"; do wait "$i"; done
rot=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median_s"])' "$D/rotate.r0")
echo "one rotate of $slice bytes on the netns: median $rot s (harp bench rotate, 10 repetitions)"
for ((rep = 1; rep <= REPS; rep++)); do
  for mode in blocking pipelined; do
    log=$D/local-$mode-$rep.log
    "$H" "${common[@]}" --workers $W --rotation "$mode" --output "$D/out-local" >"$log"
    echo "loopback $mode rep $rep: epoch $(epochs "$log") s ($(tail -2 "$log" | head -1))"
    log=$D/net-$mode-$rep.log
    netns_run "$mode" "$log"
    echo "netns $RATE $mode rep $rep: epoch $(epochs "$log") s ($(tail -2 "$log" | head -1))"
  done
done
uptime
mean() { # files...
  for f in "$@"; do epochs "$f"; echo; done | awk '{ s += $1 } END { printf "%.4f", s / NR }'
}
lb=$(mean "$D"/local-blocking-*.log)
lp=$(mean "$D"/local-pipelined-*.log)
nb=$(mean "$D"/net-blocking-*.log)
np=$(mean "$D"/net-pipelined-*.log)
awk -v lb="$lb" -v lp="$lp" -v nb="$nb" -v np="$np" -v rot="$rot" -v w=$W 'BEGIN {
  printf "epoch seconds (mean of epochs 2+ over the repetitions):\n"
  printf "  loopback: blocking %.4f, pipelined %.4f (computation)\n", lb, lp
  printf "  netns:    blocking %.4f, pipelined %.4f\n", nb, np
  printf "  communication: %d rotates x %.4f s = %.4f s (netns blocking - loopback blocking: %.4f s)\n", 2 * w, rot, 2 * w * rot, nb - lb
  printf "  computation (loopback blocking epoch): %.4f s\n", lb
  printf "  pipelined / blocking on netns: %.3f\n", np / nb }'
rm -rf "$D/out-net" "$D/out-local" "$D"/hosts-*
