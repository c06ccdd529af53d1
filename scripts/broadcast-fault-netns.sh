#!/usr/bin/env bash
# broadcast-fault-netns.sh - the fault-tolerant chain broadcast (--broadcast-retries) on the
# emulated cluster, with one link dropped in the middle of a broadcast. Needs root, iptables.
#
# USAGE
#   scripts/broadcast-fault-netns.sh [P=4] [BYTES=64m] [DROP_SECONDS=6] [RETRIES=2]
#
# Brings up P hosts at 200 Mbit/s (scripts/netns-cluster.sh, prefix bft), then runs
# `harp bench broadcast --algorithm chain --bytes BYTES --reps 3 --warmup 0` on every host,
# four ways: RETRIES=0 and RETRIES without a fault, then RETRIES=0 and RETRIES with a fault:
# AT seconds (default 4) after the start, in the second of the three broadcasts, host 1 drops
# every packet to and from host 2 (iptables DROP in host 1's namespace, both directions) for
# DROP_SECONDS, then accepts them again. For each run it prints the exit codes, rank 0's
# median and slowest time per broadcast, and the workers' warnings about restarted broadcasts.
# The namespaces are removed at the end. Environment: HARP_BIN, AT.
set -euo pipefail
P=${1:-4} BYTES=${2:-64m} DROP=${3:-6} RETRIES=${4:-2} AT=${AT:-4}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NC="$ROOT/scripts/netns-cluster.sh"
HARP_BIN=${HARP_BIN:-$ROOT/target/release/harp}
PREFIX=bft
(( EUID == 0 )) || { echo "needs root" >&2; exit 1; }
command -v iptables >/dev/null || { echo "needs iptables (apt-get install -y iptables)" >&2; exit 1; }
export HARP_SECRET=${HARP_SECRET:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
TMP=$(mktemp -d /tmp/broadcast-fault.XXXXXX)
trap '"$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT
"$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
timeout 60 "$NC" up "$P" --rate 200mbit --prefix "$PREFIX" >&2
RUN=0
run() { # name retries fault(0/1)
  local name=$1 retries=$2 fault=$3 i pids=() rcs=()
  RUN=$((RUN + 1))
  "$NC" hosts --prefix "$PREFIX" --port $(( 23000 + RUN * 16 )) >"$TMP/hosts$RUN"
  for (( i = 0; i < P; i++ )); do
    HARP_LOG=warn timeout -k 5 300 ip netns exec "${PREFIX}h$i" "$HARP_BIN" worker --hosts "$TMP/hosts$RUN" \
      --rank "$i" --job "bft$$-$RUN" bench broadcast --algorithm chain --bytes "$BYTES" --reps 3 \
      --warmup 0 --json --timeout 60 --broadcast-retries "$retries" \
      >"$TMP/$name.$i.out" 2>"$TMP/$name.$i.err" &
    pids+=($!)
  done
  if (( fault )); then
    sleep "$AT"
    ip netns exec "${PREFIX}h1" iptables -I OUTPUT -d 10.77.0.3 -j DROP
    ip netns exec "${PREFIX}h1" iptables -I INPUT -s 10.77.0.3 -j DROP
    sleep "$DROP"
    ip netns exec "${PREFIX}h1" iptables -D OUTPUT -d 10.77.0.3 -j DROP
    ip netns exec "${PREFIX}h1" iptables -D INPUT -s 10.77.0.3 -j DROP
  fi
  for i in "${pids[@]}"; do if wait "$i"; then rcs+=(0); else rcs+=($?); fi; done
  local med mx
  med=$(grep -h -o '"median_s":[0-9.e-]*' "$TMP/$name.0.out" | head -n 1 | cut -d: -f2)
  mx=$(grep -h -o '"max_s":[0-9.e-]*' "$TMP/$name.0.out" | head -n 1 | cut -d: -f2)
  echo "$name: exit codes ${rcs[*]}; median ${med:-?} s, slowest ${mx:-?} s per broadcast; warnings:"
  grep -h -i "restart\|attempt" "$TMP/$name".*.err | sed 's/^/    /' | cut -c1-240 || echo "    none"
  grep -h -i "error" "$TMP/$name".*.err | sed 's/^/    /' | cut -c1-240 || true
}
run baseline 0 0
run retries-no-fault "$RETRIES" 0
run no-retries-link-dropped 0 1
run retries-link-dropped "$RETRIES" 1
