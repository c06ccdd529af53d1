#!/usr/bin/env bash
# bench-netns.sh - run Harp-RS collective benchmarks on an emulated multi-host cluster
# (scripts/netns-cluster.sh) and append one annotated JSON line per cell to a JSONL file.
#
# USAGE
#   scripts/bench-netns.sh [options] [CELL...]
#
#   CELL = [IMPL:]OP[/ALGORITHM]@SIZE[xREPS][iINNER]
#          e.g. broadcast/chain@16mx3  allreduce@1k  allreduce@1kx20i100  mpi:broadcast@16m
#          (SIZE as harp takes it: 1k, 64m, 1048576; REPS defaults by size, see below;
#          INNER = back-to-back calls per repetition, `harp bench --inner`, default --inner)
#          IMPL: harp (default), mpi (Open MPI, scripts/bench/mpi_coll.c) or gloo
#          (scripts/bench/gloo_coll.py); peers run through scripts/bench-mpi-netns.sh on the
#          same cluster, after the same B measurement, and get the same fields and bounds.
#          Peers take no ALGORITHM (their library's default choice).
#
# OPTIONS
#   --p "2 4 8"          host counts; one cluster is brought up (and torn down) per value
#   --rate R             per-host send and receive rate (tc syntax)           [200mbit]
#   --racks K --uplink U rack shape, passed to netns-cluster.sh up
#   --uneven SEED        uneven per-pair rates, passed to netns-cluster.sh up
#   --host-rate H        with --uneven: each host at most H in all, the pairs at their R/d
#                        (netns-cluster.sh up --host-rate); records get host_rate_bits and
#                        the bounds use H instead of R (still lower bounds: no host moves
#                        more than H, whatever its pairs allow)
#   --delay D            one-way delay per host, passed to netns-cluster.sh up
#   --burst BYTES        set burst and cburst of every htb class of the cluster to BYTES
#                        (netns-cluster.sh uses max(32 KB, 4 ms at the rate) = 100 KB at
#                        200mbit, which lets a message of up to ~100 KB after an idle gap
#                        through at veth speed; use e.g. 4542 to time small messages at R)
#   --no-offload         turn TSO/GSO off on every host's eth0 (needs ethtool).  With offload
#                        a whole <=64 KB GSO packet passes htb while the class has any tokens
#                        and the debt is paid by the next packet, often the untimed barrier
#                        between repetitions, so messages up to ~64 KB per link and
#                        repetition look faster than the rate allows.  Use it (with --burst)
#                        for small sizes; it costs CPU (one qdisc pass per 1514-byte frame).
#   --gso-max BYTES      cap GSO packets on every host's eth0 at BYTES (ip link ... gso_max_size):
#                        a middle way between default offload and --no-offload (the htb debt
#                        per packet is at most BYTES, at a fraction of the per-frame CPU cost)
#   --cc NAME            TCP congestion control inside the host namespaces (sysctl
#                        net.ipv4.tcp_congestion_control there; e.g. reno, bbr, cubic if the
#                        kernel allows it).  Default: whatever new namespaces inherit.
#   --inner K            back-to-back calls per repetition for cells without iINNER       [1]
#   --peers "mpi gloo"   after each harp cell, run the same OP@SIZE (reps, inner) with these
#                        peers (once per OP@SIZE, ops they have: broadcast reduce gather
#                        scatter allreduce allgather reduce-scatter)
#   --preset NAME        add a predefined cell list:
#                          sweep      9 op/algorithms x 1k 1m 16m 64m
#                          crossover  broadcast chain|binomial, allreduce both, allgather both
#                                     x 1k 4k 16k 64k 256k 1m
#                          topology   broadcast chain|chain-random x 16m 64m
#                          uneven     7 main op/algorithms x 16m 64m
#   --cells-file FILE    add cells from FILE (one per line, # comments)
#   --out FILE           JSONL to append to                       [bench/netns/netns.jsonl]
#   --label TEXT         free text stored in every record (e.g. "chunk sweep")
#   --iperf-only         only measure the TCP payload rate B (no harp cells)
#   --no-iperf           skip the iperf3 measurement (bounds then use 0.956 x nominal rate)
#   --warmup N           untimed repetitions (default: 2 below 16 MiB, 1 from 16 MiB)
#   --reps N             override every cell's repetitions
#   --timeout S          harp worker --timeout (silent-peer timeout)                    [120]
#   --cell-timeout S     hard wall-clock limit per cell (default: estimated from the size)
#   --top                sample `top -b -d 0.5` while each cell runs; stores average CPU figures
#   --prefix P           namespace prefix (this script owns it; stale ones are removed) [hbench]
#   --net-model SRC      give every harp cell a network model (`harp worker --net-model FILE`):
#                        SRC = status: built after `up` from the configured rates (the `status`
#                        pair table with --uneven, the rack shape with --racks: min(R, U)
#                        across racks, else R) x 0.956 (TCP payload over htb frames), latency
#                        100 us for every pair, with --host-rate H x 0.956 as every host's
#                        capacity (host_Bps); SRC = measure: measured after `up` by
#                        `harp worker ... netmap` on every host (pairs and host intakes,
#                        the engine's default bounds; its cost is logged); SRC = a
#                        directory: DIR/p<N>.txt for p = N (e.g. measured with `harp
#                        netmap`).  A `status` or `measure` model is kept as
#                        <dir of --out>/netmodels/<shape>[-measured]-p<N>.txt; every record
#                        stores net_model_file and net_model_source.
#   --                   everything after is passed to `harp bench` (e.g. --chunk 262144
#                        --socket-buffer 4194304 --io-threads 2)
#
# REPETITIONS (when a cell gives none): <=256 KiB: 20, <=1 MiB: 10, <=16 MiB: 3, bigger: 2.
#
# ENVIRONMENT
#   HARP_BIN     harp binary (default: target/release/harp, built with
#                `cargo build --release -p harp-cli` first)
#   HARP_SECRET  job secret (default: a fresh random one)
#
# OUTPUT (one JSON object per line, appended to --out)
#   kind "iperf": {"kind","shape","p","rate_bits","B_bits","B_inter_bits",...}
#   kind "bench": rank 0's `harp bench --json` object (or the peer's line, same field names,
#     see bench-mpi-netns.sh) plus impl ("harp", "openmpi", "gloo"),
#     shape, p, rate_bits, racks, uplink_bits, uneven_seed, host_rate_bits, delay, tcp_cc,
#     htb_burst, offload,
#     B_bits (measured TCP payload
#     rate, bit/s), B_inter_bits (racks: across the uplink), bound_s (lower bound from B, see
#     below), bound_formula, ratio (median_s / bound_s), warmup, extra (passthrough args),
#     label, commit (repository HEAD, "+dirty" if rust/ differs), harp_sha256 (first 12 hex
#     digits of the binary's SHA-256), time, cpu (with --top)
#   kind "error": a cell that failed or timed out (with the tail of the workers' stderr)
#
# BOUNDS (n = --bytes, B = measured TCP payload rate in bytes/s; scripts/bench-bound.jq)
#   broadcast and reduce n/B; allreduce 2(p-1)/p n/B; allgather (n = total gathered),
#   reduce-scatter and regroup (n = each worker's table) (p-1)/p n/B; gather (n = total) and
#   scatter (p-1)/p n/B; other ops: none.  With racks and an uplink slower than the hosts,
#   broadcast and reduce use B_inter (every element must enter the root's rack / each rack) and
#   gather and scatter the larger of (p-1)/p n/B and the root rack's uplink share.
#
# Every wait is bounded: each worker runs under `timeout`, iperf3 likewise, and the EXIT trap
# kills what this script started and tears the namespaces down.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NC="$ROOT/scripts/netns-cluster.sh"
# shellcheck source=bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"   # PROG, die, log, usage, bytes, default_reps, default_warmup

PS_LIST="2 4 8" RATE=200mbit RACKS='' UPLINK='' UNEVEN='' HOST_RATE='' DELAY='' OUT="$ROOT/bench/netns/netns.jsonl"
LABEL='' IPERF=1 IPERF_ONLY=0 WARMUP='' REPS_OVERRIDE='' WTIMEOUT=120 CELL_TIMEOUT='' TOP=0
PREFIX=hbench CC='' TCP_CC='' BURST='' NO_OFFLOAD=0 GSO_MAX='' INNER=1 PEERS=''
CELLS=() EXTRA=() NET_MODEL='' NET_MODEL_FILE=''

preset() {
  local ops size
  case $1 in
    sweep)
      ops="broadcast/chain broadcast/binomial broadcast/one-by-one allgather/ring allgather/known-total
           allreduce/bidirectional-exchange allreduce/regroup-allgather reduce-scatter regroup"
      for size in 1k 1m 16m 64m; do for o in $ops; do CELLS+=("$o@$size"); done; done ;;
    crossover)
      ops="broadcast/chain broadcast/binomial allreduce/bidirectional-exchange allreduce/regroup-allgather
           allgather/ring allgather/known-total"
      for size in 1k 4k 16k 64k 256k 1m; do for o in $ops; do CELLS+=("$o@$size"); done; done ;;
    topology)
      for size in 16m 64m; do for o in broadcast/chain broadcast/chain-random; do CELLS+=("$o@$size"); done; done ;;
    uneven)
      ops="broadcast/chain broadcast/binomial allgather/ring allreduce/regroup-allgather
           allreduce/bidirectional-exchange reduce-scatter regroup"
      for size in 16m 64m; do for o in $ops; do CELLS+=("$o@$size"); done; done ;;
    *) die "unknown preset '$1' (sweep, crossover, topology, uneven)" ;;
  esac
}

while [[ $# -gt 0 ]]; do
  case $1 in
    --p|--rate|--racks|--uplink|--uneven|--host-rate|--delay|--cc|--burst|--gso-max|--preset|--cells-file|--out|--label|--warmup|--reps|--timeout|--cell-timeout|--prefix|--inner|--peers)
      [[ $# -ge 2 ]] || { echo "$PROG: $1 needs a value" >&2; usage; } ;;&
    --p) PS_LIST=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --racks) RACKS=$2; shift 2 ;;
    --uplink) UPLINK=$2; shift 2 ;;
    --uneven) UNEVEN=$2; shift 2 ;;
    --host-rate) HOST_RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --cc) CC=$2; shift 2 ;;
    --burst) BURST=$2; shift 2 ;;
    --no-offload) NO_OFFLOAD=1; shift ;;
    --gso-max) GSO_MAX=$2; shift 2 ;;
    --preset) preset "$2"; shift 2 ;;
    --cells-file) [[ -f $2 ]] || die "no file $2"
      while read -r l; do l=${l%%#*}; for c in $l; do CELLS+=("$c"); done; done <"$2"; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --label) LABEL=$2; shift 2 ;;
    --iperf-only) IPERF_ONLY=1; shift ;;
    --no-iperf) IPERF=0; shift ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --reps) REPS_OVERRIDE=$2; shift 2 ;;
    --timeout) WTIMEOUT=$2; shift 2 ;;
    --cell-timeout) CELL_TIMEOUT=$2; shift 2 ;;
    --top) TOP=1; shift ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --net-model) NET_MODEL=$2; shift 2 ;;
    --inner) INNER=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    -h|--help) usage ;;
    --) shift; EXTRA=("$@"); break ;;
    -*) echo "$PROG: unknown option $1" >&2; usage ;;
    *) CELLS+=("$1"); shift ;;
  esac
done

[[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces)"
for c in ip tc iperf3 jq timeout awk; do command -v "$c" >/dev/null || die "missing command $c"; done
[[ -n $RACKS || -n $UPLINK ]] && { [[ -n $RACKS && -n $UPLINK ]] || die "--racks and --uplink go together"; }
(( IPERF_ONLY || ${#CELLS[@]} > 0 )) || die "no cells (give CELL arguments, --preset or --cells-file)"
[[ $PREFIX =~ ^[A-Za-z][A-Za-z0-9_-]{0,15}$ ]] || die "bad prefix"
[[ $INNER =~ ^[1-9][0-9]*$ ]] || die "--inner must be a positive integer"
for x in $PEERS; do case $x in mpi|gloo) ;; *) die "unknown peer '$x' in --peers (mpi, gloo)" ;; esac; done
if [[ -n $PEERS ]]; then   # each harp cell is followed by the peers' cells for its OP@SIZE
  declare -A SEEN=()
  ALL=()
  for c in "${CELLS[@]}"; do
    ALL+=("$c")
    [[ $c == *:* ]] && continue
    op=${c%%@*}; op=${op%%/*}; key="$op@${c#*@}"
    [[ -n ${SEEN[$key]:-} ]] && continue
    SEEN[$key]=1
    for x in $PEERS; do
      case $x:$op in
        *:broadcast|*:reduce|*:gather|*:scatter|*:allreduce|*:allgather|*:reduce-scatter) ALL+=("$x:$key") ;;
      esac
    done
  done
  CELLS=("${ALL[@]}")
fi
for c in "${CELLS[@]}"; do [[ $c == mpi:* ]] && { command -v mpicc >/dev/null ||
  die "cell $c needs mpicc (apt-get install -y openmpi-bin libopenmpi-dev)"; break; }; done

if [[ -z ${HARP_BIN:-} ]]; then
  (cd "$ROOT" && cargo build --release -q -p harp-cli) || die "cargo build failed"
  HARP_BIN="$ROOT/target/release/harp"
fi
HARP_BIN=$(readlink -f "$HARP_BIN")
[[ -x $HARP_BIN ]] || die "no harp binary at $HARP_BIN"
export HARP_SECRET=${HARP_SECRET:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}

COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD -- rust 2>/dev/null || COMMIT="$COMMIT+dirty"
HARP_SHA=$(sha256sum "$HARP_BIN" | cut -c1-12)
rate_bits() {   # rate_bits R -> bit/s of a tc-style rate
  awk -v s="${1,,}" 'BEGIN {
  if (!match(s, /^[0-9.]+/)) exit 1; n = substr(s, 1, RLENGTH); u = substr(s, RLENGTH + 1)
  m["" ]=1; m["bit"]=1; m["kbit"]=1e3; m["mbit"]=1e6; m["gbit"]=1e9; m["kibit"]=1024; m["mibit"]=1048576
  m["gibit"]=1073741824; m["bps"]=8; m["kbps"]=8e3; m["mbps"]=8e6; m["gbps"]=8e9
  if (!(u in m)) exit 1; printf "%.0f\n", n * m[u] }'
}
RATE_BITS=$(rate_bits "$RATE") || die "bad rate $RATE"
HOST_RATE_BITS=null
if [[ -n $HOST_RATE ]]; then
  [[ -n $UNEVEN ]] || die "--host-rate needs --uneven"
  HOST_RATE_BITS=$(rate_bits "$HOST_RATE") || die "bad host rate $HOST_RATE"
fi
UPLINK_BITS=0
[[ -n $UPLINK ]] && UPLINK_BITS=$(awk -v s="${UPLINK,,}" 'BEGIN { match(s, /^[0-9.]+/); n = substr(s, 1, RLENGTH);
  u = substr(s, RLENGTH + 1); f = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1; printf "%.0f\n", n * f }')
SHAPE_PARTS=()
[[ -n $RACKS ]] && SHAPE_PARTS+=("racks$RACKS-uplink${UPLINK,,}")
[[ -n $UNEVEN ]] && SHAPE_PARTS+=("uneven$UNEVEN")
[[ -n $HOST_RATE ]] && SHAPE_PARTS+=("host${HOST_RATE,,}")
[[ -n $DELAY ]] && SHAPE_PARTS+=("delay$DELAY")
(( ${#SHAPE_PARTS[@]} )) || SHAPE_PARTS=(flat)
SHAPE=$(IFS=-; echo "${SHAPE_PARTS[*]}")

TMP=$(mktemp -d /tmp/bench-netns.XXXXXX)
PIDS=()
cleanup() {
  local st=$? pid
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  timeout 60 "$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || log "teardown of prefix $PREFIX failed"
  rm -rf "$TMP"
  exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$(dirname "$OUT")"
ns() { echo "${PREFIX}h$1"; }
ip_of() { echo "10.77.0.$(( $1 + 1 ))"; }


# iperf_bits SRC DST -> receiver bit/s (empty on failure); 1 s omitted + 4 s measured
IPORT=5400
iperf_bits() {
  local src=$1 dst=$2 pidf json
  IPORT=$((IPORT + 1)); pidf="$TMP/iperf-$IPORT.pid"; json="$TMP/iperf-$IPORT.json"
  timeout 5 ip netns exec "$(ns "$dst")" iperf3 -s -D -1 -B "$(ip_of "$dst")" -p "$IPORT" -I "$pidf" \
    --logfile "$TMP/iperf-server-$IPORT.log" >/dev/null 2>&1 || return 0
  for _ in $(seq 50); do
    ip netns exec "$(ns "$dst")" ss -Hltn "sport = :$IPORT" 2>/dev/null | grep -q . && break; sleep 0.1
  done
  timeout 20 ip netns exec "$(ns "$src")" iperf3 -c "$(ip_of "$dst")" -B "$(ip_of "$src")" -p "$IPORT" \
    -t 4 -O 1 -J >"$json" 2>/dev/null || true
  [[ -f $pidf ]] && kill "$(cat "$pidf")" 2>/dev/null || true
  jq -r '.end.sum_received.bits_per_second // empty | floor' "$json" 2>/dev/null || true
}

# pair_rate_bits I J -> configured rate of the pair (uneven) from `status`, else the host rate
pair_rate_bits() {
  if [[ -z $UNEVEN ]]; then echo "$RATE_BITS"; return; fi
  "$NC" status --prefix "$PREFIX" | awk -v i="$1" -v j="$2" '
    /^per-pair rate/ { t = 1; next }
    t == 1 { t = 2; next }                                   # the column header line
    t == 2 && $1 == "h" i { printf "%.0f\n", $(j + 2) * 1e6; exit }'
}

B_BITS='' B_INTER=null
measure_b() {   # sets B_BITS (flat-equivalent, host link) and B_INTER (racks)
  local p=$1 j=1 pr got
  if (( ! IPERF )); then
    B_BITS=$(awk -v r="$RATE_BITS" 'BEGIN { printf "%.0f", r * 1448 / 1514 }'); B_INTER=null
    return
  fi
  if [[ -n $UNEVEN ]]; then   # measure a pair at the full rate if there is one
    for (( j = 1; j < p; j++ )); do [[ $(pair_rate_bits 0 "$j") == "$RATE_BITS" ]] && break; done
    (( j < p )) || j=1
  elif [[ -n $RACKS ]]; then j=1; fi
  pr=$(pair_rate_bits 0 "$j")
  [[ $pr =~ ^[1-9][0-9]*$ ]] || die "cannot read the configured rate of pair h0->h$j"
  got=$(iperf_bits 0 "$j")
  [[ -n $got ]] || die "iperf3 h0->h$j gave no result"
  B_BITS=$(awk -v g="$got" -v pr="$pr" -v r="$RATE_BITS" 'BEGIN { printf "%.0f", g * r / pr }')
  B_INTER=null
  if [[ -n $RACKS ]] && (( RACKS > 1 )); then
    got=$(iperf_bits 0 $(( p - 1 )))
    [[ -n $got ]] && B_INTER=$got
  fi
  log "tcp_cc $TCP_CC; B (TCP payload, h0->h$j, flat-equivalent) = $(awk -v b="$B_BITS" 'BEGIN { printf "%.1f", b / 1e6 }') Mbit/s; B_inter = $B_INTER"
  jq -cn --arg shape "$SHAPE" --argjson p "$p" --argjson rate "$RATE_BITS" --argjson b "$B_BITS" \
    --argjson bi "$B_INTER" --argjson pr "$pr" --arg pair "h0->h$j" --arg lbl "$LABEL" --arg cc "$TCP_CC" --arg kernel "$(uname -r)" --arg burst "$BURST" --argjson offload "$(( ! NO_OFFLOAD ))" \
    --arg time "$(date -u +%FT%TZ)" \
    '{kind:"iperf", shape:$shape, p:$p, rate_bits:$rate, B_bits:$b, B_inter_bits:$bi,
      pair:$pair, pair_rate_bits:$pr, tcp_cc:$cc, kernel:$kernel,
      htb_burst:(if $burst == "" then "default" else ($burst|tonumber) end), offload:($offload == 1), tool:"iperf3 -t 4 -O 1 (receiver)", "label":$lbl, time:$time}' >>"$OUT"
}

# write_net_model P -> sets NET_MODEL_FILE (see --net-model)
write_net_model() {
  local p=$1
  NET_MODEL_FILE=''
  [[ -n $NET_MODEL ]] || return 0
  if [[ $NET_MODEL == measure ]]; then
    mkdir -p "$(dirname "$OUT")/netmodels"
    NET_MODEL_FILE="$(dirname "$OUT")/netmodels/$SHAPE-measured-p$p.txt"
    local hosts="$TMP/hosts-netmap" i pids=() ok=1
    "$NC" hosts --prefix "$PREFIX" --port 19000 >"$hosts"
    for (( i = 0; i < p; i++ )); do
      timeout -k 5 300 ip netns exec "$(ns "$i")" "$HARP_BIN" worker --hosts "$hosts" --rank "$i" \
        --job "bn$$-netmap" netmap --output "$NET_MODEL_FILE" >"$TMP/netmap.r$i.out" 2>"$TMP/netmap.r$i.err" &
      pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || ok=0; done
    (( ok )) || die "--net-model measure: harp netmap failed: $(cat "$TMP"/netmap.r*.err | head -5)"
    log "$(grep -m1 'measured in' "$TMP/netmap.r0.out")"
    log "measured net model for p=$p written to $NET_MODEL_FILE"
    return 0
  fi
  if [[ $NET_MODEL != status ]]; then
    NET_MODEL_FILE="$NET_MODEL/p$p.txt"
    [[ -f $NET_MODEL_FILE ]] || die "--net-model $NET_MODEL: no $NET_MODEL_FILE"
    return 0
  fi
  mkdir -p "$(dirname "$OUT")/netmodels"
  NET_MODEL_FILE="$(dirname "$OUT")/netmodels/$SHAPE-p$p.txt"
  local table=''
  [[ -n $UNEVEN ]] && table=$("$NC" status --prefix "$PREFIX" | awk '
      /^per-pair rate/ { t = 1; next } t == 1 { t = 2; next }
      t == 2 && $1 ~ /^h[0-9]+$/ { $1 = ""; print }')
  awk -v p="$p" -v r="$RATE_BITS" -v u="$UPLINK_BITS" -v k="${RACKS:-0}" -v tbl="$table" -v h="$HOST_RATE_BITS" 'BEGIN {
      n = split(tbl, rows, "\n")
      print "# harp net model v1 (bench-netns.sh --net-model status: configured rates x 0.956)"
      print "workers " p; print "latency_s"
      for (i = 0; i < p; i++) { line = ""; for (j = 0; j < p; j++) line = line (j ? " " : "") (i == j ? "0" : "1e-4"); print line }
      print "bandwidth_Bps"
      for (i = 0; i < p; i++) {
        if (n > 0) split(rows[i + 1], f, " ")
        line = ""
        for (j = 0; j < p; j++) {
          if (i == j) { v = "inf" }
          else {
            bits = r
            if (n > 0) bits = f[j + 1] * 1e6
            else if (k > 1 && int(i * k / p) != int(j * k / p) && u > 0 && u < r) bits = u
            v = sprintf("%.4e", bits / 8 * 0.956)
          }
          line = line (j ? " " : "") v
        }
        print line
      }
      if (h != "null") {
        print "host_Bps"; line = ""
        for (i = 0; i < p; i++) line = line (i ? " " : "") sprintf("%.4e", h / 8 * 0.956)
        print line
      }
    }' >"$NET_MODEL_FILE"
  log "net model for p=$p written to $NET_MODEL_FILE"
}

cluster_up() {
  local p=$1
  local args=(up "$p" --rate "$RATE" --prefix "$PREFIX")
  [[ -n $RACKS ]] && args+=(--racks "$RACKS" --uplink "$UPLINK")
  [[ -n $UNEVEN ]] && args+=(--uneven "$UNEVEN")
  [[ -n $HOST_RATE ]] && args+=(--host-rate "$HOST_RATE")
  [[ -n $DELAY ]] && args+=(--delay "$DELAY")
  timeout 60 "$NC" "${args[@]}" >&2 || die "netns-cluster.sh ${args[*]} failed"
  local i
  if [[ -n $CC ]]; then
    for (( i = 0; i < p; i++ )); do
      ip netns exec "$(ns "$i")" sysctl -qw "net.ipv4.tcp_congestion_control=$CC" ||
        die "cannot set tcp_congestion_control=$CC in $(ns "$i") (available: $(cat /proc/sys/net/ipv4/tcp_available_congestion_control))"
    done
  fi
  TCP_CC=$(ip netns exec "$(ns 0)" cat /proc/sys/net/ipv4/tcp_congestion_control)
  [[ -n $BURST ]] && set_burst
  if [[ -n $GSO_MAX ]]; then
    for (( i = 0; i < p; i++ )); do
      ip -n "$(ns "$i")" link set dev eth0 gso_max_size "$GSO_MAX" || die "cannot set gso_max_size in $(ns "$i")"
    done
  fi
  if (( NO_OFFLOAD )); then
    command -v ethtool >/dev/null || die "--no-offload needs ethtool (apt-get install ethtool)"
    for (( i = 0; i < p; i++ )); do
      ip netns exec "$(ns "$i")" ethtool -K eth0 tso off gso off >/dev/null 2>&1 || die "ethtool -K in $(ns "$i") failed"
    done
  fi
  return 0
}

set_burst() {   # every htb class in this cluster's namespaces gets burst = cburst = $BURST
  local n dev line cls parent rate ceil count=0
  for n in $(ip netns list | awk '{ print $1 }' | grep -E "^${PREFIX}(sw|h[0-9]+)\$"); do
    for dev in $(tc -n "$n" qdisc show | awk '$2 == "htb" { print $5 }'); do
      while read -r line; do
        cls=$(awk '{ print $3 }' <<<"$line")
        if [[ $line == *" root "* ]]; then parent=root; else parent="parent $(awk '{ for (i = 1; i < NF; i++) if ($i == "parent") print $(i+1) }' <<<"$line")"; fi
        rate=$(awk '{ for (i = 1; i < NF; i++) if ($i == "rate") print $(i+1) }' <<<"$line")
        ceil=$(awk '{ for (i = 1; i < NF; i++) if ($i == "ceil") print $(i+1) }' <<<"$line")
        # shellcheck disable=SC2086
        tc -n "$n" class change dev "$dev" $parent classid "$cls" htb rate "$rate" ceil "$ceil" \
          burst "$BURST" cburst "$BURST" quantum 60000 || die "tc class change $n $dev $cls failed"
        count=$((count + 1))
      done < <(tc -n "$n" class show dev "$dev" | grep '^class htb')
    done
  done
  log "htb burst/cburst set to $BURST bytes on $count classes"
}

CELL_NO=0
run_cell() {   # run_cell P SPEC
  local p=$1 spec=$2 op alg='' size reps inner impl warm n tmo base hosts job i rc=0 rcs=() pids=() out err
  [[ $spec =~ ^((harp|mpi|gloo):)?([a-z-]+)(/([a-z-]+))?@([0-9]+[kmgKMG]?)(x([0-9]+))?(i([0-9]+))?$ ]] ||
    die "bad cell '$spec' ([IMPL:]OP[/ALG]@SIZE[xREPS][iINNER])"
  impl=${BASH_REMATCH[2]:-harp} op=${BASH_REMATCH[3]} alg=${BASH_REMATCH[5]} size=${BASH_REMATCH[6]}
  reps=${BASH_REMATCH[8]} inner=${BASH_REMATCH[10]:-$INNER}
  [[ $impl == harp || -z $alg ]] || die "cell '$spec': peers take no /ALGORITHM"
  n=$(bytes "$size")
  [[ -n $reps ]] || reps=$(default_reps "$n")
  [[ -n $REPS_OVERRIDE ]] && reps=$REPS_OVERRIDE
  warm=${WARMUP:-$(default_warmup "$n")}
  # Wall-clock limit: 3x the one-by-one time (p-1)n/R at 80 % efficiency, plus start-up and
  # 0.1 s per call (gloo's small collectives take 10-40 ms each at p = 8).
  tmo=$CELL_TIMEOUT
  [[ -n $tmo ]] || tmo=$(awk -v n="$n" -v p="$p" -v r="$RATE_BITS" -v k=$(( (reps + warm + 1) * inner )) -v u="$UPLINK_BITS" \
    'BEGIN { b = r; if (u > 0 && u < b) b = u; t = 45 + 3 * k * (p - 1) * n * 8 / (0.8 * b) + 0.1 * k; if (t > 1800) t = 1800; printf "%d", t }')
  CELL_NO=$((CELL_NO + 1))
  base=$(( 20000 + (CELL_NO % 1000) * 16 ))
  hosts="$TMP/hosts-$CELL_NO"
  "$NC" hosts --prefix "$PREFIX" --port "$base" >"$hosts"
  job="bn$$-$CELL_NO"
  local bargs=(bench "$op" --bytes "$size" --reps "$reps" --inner "$inner" --warmup "$warm" --json --timeout "$WTIMEOUT")
  [[ -n $alg ]] && bargs+=(--algorithm "$alg")
  bargs+=("${EXTRA[@]}")
  [[ -n $NET_MODEL_FILE ]] && bargs+=(--net-model "$NET_MODEL_FILE")
  local t0=$SECONDS
  if [[ $impl == harp ]]; then
    for (( i = 0; i < p; i++ )); do
      timeout -k 5 "$tmo" ip netns exec "$(ns "$i")" "$HARP_BIN" worker --hosts "$hosts" --rank "$i" --job "$job" \
        "${bargs[@]}" >"$TMP/c$CELL_NO.r$i.out" 2>"$TMP/c$CELL_NO.r$i.err" &
      pids+=($!); PIDS+=($!)
    done
  else   # a peer, one rank per host, through bench-mpi-netns.sh (which bounds it by $tmo)
    local pimpl=openmpi; [[ $impl == gloo ]] && pimpl=gloo
    timeout -k 5 $(( tmo + 60 )) "$ROOT/scripts/bench-mpi-netns.sh" --prefix "$PREFIX" --p "$p" \
      --impl "$pimpl" --raw --warmup "$warm" --timeout "$tmo" "$op@${n}x${reps}i${inner}" \
      >"$TMP/c$CELL_NO.r0.out" 2>"$TMP/c$CELL_NO.r0.err" &
    pids+=($!); PIDS+=($!)
  fi
  local cpu=null toppid=''
  if (( TOP )); then
    top -b -d 0.5 -n 2000 -w 250 >"$TMP/top-$CELL_NO" 2>/dev/null &
    toppid=$!; PIDS+=("$toppid")
  fi
  for (( i = 0; i < ${#pids[@]}; i++ )); do
    if wait "${pids[$i]}"; then rcs+=(0); else rc=$?; rcs+=("$rc"); fi
  done
  if [[ -n $toppid ]]; then
    kill "$toppid" 2>/dev/null || true; wait "$toppid" 2>/dev/null || true
    # average over the samples (after the first) in which harp workers were running
    cpu=$(awk -v bin="${HARP_BIN##*/}" -v p="$p" '
      function flush() { if (it > 1 && nh == p) { k++; I += idle; U += us; S += sy; Q += si; H += h; if (mx > M) M = mx } }
      /^top - / { flush(); it++; nh = 0; h = 0; mx = 0; next }
      /^%Cpu/ { sub(/^%Cpu\(s\):/, ""); gsub(/,/, " "); for (i = 1; i < NF; i++) {
                  if ($(i+1) == "id") idle = $i; if ($(i+1) == "us") us = $i; if ($(i+1) == "sy") sy = $i; if ($(i+1) == "si") si = $i } next }
      $NF == bin { nh++; h += $9; if ($9 > mx) mx = $9 }
      END { flush(); if (k == 0) { print "null"; exit }
            printf "{\"samples\":%d,\"idle_pct\":%.1f,\"us_pct\":%.1f,\"sy_pct\":%.1f,\"si_pct\":%.1f,\"harp_cpu_pct_sum\":%.1f,\"harp_cpu_pct_max\":%.1f}\n",
                   k, I / k, U / k, S / k, Q / k, H / k, M }' "$TMP/top-$CELL_NO")
  fi
  PIDS=()
  local secs=$((SECONDS - t0)) line
  line=$(grep -m1 '^{' "$TMP/c$CELL_NO.r0.out" 2>/dev/null || true)
  local bad=0; for i in "${rcs[@]}"; do (( i == 0 )) || bad=1; done
  [[ -n $line ]] && [[ $(jq -r '.kind // "bench"' <<<"$line") == error ]] && bad=1   # a peer's error record
  local implname=harp; [[ $impl == mpi ]] && implname=openmpi; [[ $impl == gloo ]] && implname=gloo
  local common
  common=$(jq -cn --arg shape "$SHAPE" --argjson p "$p" --argjson rate "$RATE_BITS" \
    --argjson racks "${RACKS:-0}" --argjson uplink "$UPLINK_BITS" --arg seed "$UNEVEN" --arg delay "$DELAY" \
    --argjson hostrate "$HOST_RATE_BITS" \
    --argjson b "$B_BITS" --argjson bi "$B_INTER" --arg lbl "$LABEL" --arg commit "$COMMIT" --arg sha "$HARP_SHA" \
    --arg time "$(date -u +%FT%TZ)" --argjson warm "$warm" --arg extra "${EXTRA[*]}" --argjson secs "$secs" \
    --argjson cpu "$cpu" --arg spec "$spec" --arg cc "$TCP_CC" --arg burst "$BURST" --argjson offload "$(( ! NO_OFFLOAD ))" --arg gso "$GSO_MAX" \
    --arg impl "$implname" --arg nmf "$NET_MODEL_FILE" --arg nms "$NET_MODEL" \
    '{impl:$impl, net_model_source:(if $nms == "" then null else $nms end),
      net_model_file:(if $nmf == "" then null else $nmf end), shape:$shape, p:$p, rate_bits:$rate, racks:$racks, uplink_bits:$uplink,
      uneven_seed:(if $seed == "" then null else ($seed|tonumber) end), host_rate_bits:$hostrate, delay:(if $delay == "" then null else $delay end),
      B_bits:$b, B_inter_bits:$bi, tcp_cc:$cc,
      htb_burst:(if $burst == "" then "default" else ($burst|tonumber) end), offload:($offload == 1), gso_max:(if $gso == "" then null else ($gso|tonumber) end), warmup:$warm, extra:$extra, cell:$spec, wall_s:$secs, cpu:$cpu,
      "label":$lbl, commit:$commit, harp_sha256:$sha, time:$time}')
  if (( bad )) || [[ -z $line ]]; then
    if [[ $impl == harp ]]; then
      err=$(for (( i = 0; i < p; i++ )); do tail -n 3 "$TMP/c$CELL_NO.r$i.err" | sed "s/^/r$i: /"; done | head -c 2000)
    else
      err=$({ jq -r '.stderr // empty' <<<"$line" 2>/dev/null; tail -n 5 "$TMP/c$CELL_NO.r0.err"; } | head -c 2000)
    fi
    log "FAILED $spec p=$p (exit codes ${rcs[*]}, limit ${tmo}s): $(echo "$err" | head -n 3)"
    jq -cn --argjson c "$common" --arg op "$op" --arg alg "$alg" --argjson bytes "$n" --arg rcs "${rcs[*]}" \
      --arg err "$err" --argjson tmo "$tmo" \
      '$c + {kind:"error", op:$op, algorithm:$alg, bytes:$bytes, exit_codes:$rcs, cell_timeout_s:$tmo, stderr:$err}' >>"$OUT"
    return 0
  fi
  out=$(jq -c --argjson c "$common" '. + $c + {kind:"bench"}' <<<"$line" | jq -c -f "$ROOT/scripts/bench-bound.jq")
  echo "$out" >>"$OUT"
  log "$(jq -r '"\(.impl) \(.op)/\(.algorithm) \(.bytes)B p=\(.p) reps=\(.reps) inner=\(.inner): median \(.median_s*1000|.*1000|round/1000) ms"
    + (if .ratio then ", bound \(.bound_s*1000|.*1000|round/1000) ms, ratio \(.ratio*1000|round/1000)" else "" end)
    + (if .cpu then ", cpu idle \(.cpu.idle_pct)% si \(.cpu.si_pct)% harp sum \(.cpu.harp_cpu_pct_sum)% max \(.cpu.harp_cpu_pct_max)%" else "" end)' <<<"$out") [${secs}s]"
}

log "harp $HARP_BIN (sha256 $HARP_SHA, repo $COMMIT), shape $SHAPE, rate $RATE, p in {$PS_LIST}, ${#CELLS[@]} cells, out $OUT"
if ip netns list 2>/dev/null | awk '{ print $1 }' | grep -Eq "^${PREFIX}(sw|h[0-9]+)\$"; then
  log "removing stale namespaces with prefix $PREFIX"
  timeout 60 "$NC" down --prefix "$PREFIX" >/dev/null
fi
for p in $PS_LIST; do
  cluster_up "$p"
  measure_b "$p"
  write_net_model "$p"
  if (( ! IPERF_ONLY )); then
    for c in "${CELLS[@]}"; do run_cell "$p" "$c"; done
  fi
  timeout 60 "$NC" down --prefix "$PREFIX" >/dev/null
done
log "done; results appended to $OUT"
