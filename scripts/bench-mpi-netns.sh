#!/usr/bin/env bash
# bench-mpi-netns.sh - run the peers' collective benchmarks (Open MPI: scripts/bench/mpi_coll.c;
# gloo: scripts/bench/gloo_coll.py) on the hosts of a RUNNING scripts/netns-cluster.sh cluster,
# one rank per host, and print (or append) one JSON line per cell.
#
# USAGE
#   scripts/bench-mpi-netns.sh --prefix P [options] [CELL...]
#   scripts/bench-mpi-netns.sh --selftest [--impl openmpi|gloo]
#       no cluster needed: 3 ranks on loopback, every op at 8, 1000 and 1048600 bytes (sizes
#       that 3 does not divide) with the result check, then runs whose check must fail
#       (--corrupt R); prints `selftest: N passed, M failed` and exits 1 on any failure
#
#   CELL = OP@SIZE[xREPS][iINNER]     e.g. broadcast@16mx3  allreduce@1kx20i100
#   OP   = broadcast (bcast), reduce, gather, scatter, allreduce, allgather,
#          reduce-scatter (reduce_scatter); sizes as `harp bench --bytes` takes them (1k, 16m)
#          and with the same meaning: allgather and gather: the total gathered; every other
#          op: each worker's table (scatter: the root's); doubles, MPI_SUM / SUM, root 0.
#
# OPTIONS
#   --prefix P       the cluster's namespace prefix (netns-cluster.sh up ... --prefix P)
#   --p N            ranks on hosts 0..N-1 (default: every host of the cluster)
#   --impl NAME      openmpi (default) or gloo (needs python3 with torch; see $GLOO_PYTHON)
#   --ops "A B"      with --sizes: add the cells OP@SIZE for every pair
#   --sizes "1k 16m"
#   --reps N         repetitions of every cell (default by size: <=256 KiB 20, <=1 MiB 10,
#                    <=16 MiB 3, bigger 2; a cell's xREPS wins)
#   --inner K        back-to-back calls per repetition (default 1; a cell's iINNER wins)
#   --warmup N       untimed repetitions (default: 2 below 16 MiB, 1 from 16 MiB)
#   --no-validate    skip the check run (by default every cell first makes one call with
#                    known inputs and checks every rank's result; a wrong result fails the
#                    cell with exit code 3 and an "error" record)
#   --out FILE       append the JSON lines to FILE (default: standard output)
#   --timeout S      wall-clock limit of each cell (default: estimated from size and reps)
#   --label TEXT     stored in every record
#   --raw            print the benchmark's own JSON only (used by bench-netns.sh)
#   --mpirun-arg A   one more argument for mpirun (repeatable), e.g. --mpirun-arg --mca
#                    --mpirun-arg coll_tuned_use_dynamic_rules --mpirun-arg 1
#
# HOW IT RUNS (Open MPI)
#   mpi_coll.c is compiled with mpicc into a temporary directory (never committed as a
#   binary).  mpirun runs in host 0's namespace with `--host 10.77.0.1,...,10.77.0.N` and
#   `--mca plm_rsh_agent AGENT`, AGENT being a generated script that maps an address
#   10.77.0.(i+1) to namespace ${P}h<i> and runs the daemon there with `ip netns exec` (no
#   ssh).  Transport: --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0
#   --mca oob_tcp_if_include eth0, so every byte between ranks crosses the shaped veths.
#   --mca mpi_yield_when_idle 1: the emulated hosts share the machine's cores, and Open MPI's
#   default busy polling with 8 ranks on 2 cores made a 1 KiB allreduce take 25.9 ms instead
#   of 0.53 ms (p = 8, 200mbit); Open MPI sets this itself when it knows a node is
#   oversubscribed, which it cannot see here (one slot per emulated host).
#   --mca routed direct: every daemon talks to mpirun directly.  Each emulated host also gets
#   its address as hostname (unshare --uts): with one shared hostname, ORTE failed 2 of about 30
#   runs with "no-path ... my node: vm, target node: 10.77.0.3" (one of them with routed=direct).
#   gloo: one python process per host namespace (torch.distributed, backend gloo, TCPStore
#   on host 0), started directly with `ip netns exec`.
#
# OUTPUT (one JSON object per cell)
#   kind "bench": the benchmark's line (impl, op, mpi_op, algorithm, workers, bytes, elements,
#     reps, inner, warmup, median_s, min_s, max_s, throughput_mb_s, validated, mpi_library or
#     torch_version) plus p, prefix, tcp_cc, cell, wall_s, label, time
#   kind "error": a cell that failed or timed out, with exit code and the tail of stderr
#
# Every wait is bounded with `timeout`; on exit the processes this script started (and any
# of its benchmark processes left in the cluster's namespaces) are killed.  The cluster
# itself is left up (bring it down with netns-cluster.sh down --prefix P).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NC="$ROOT/scripts/netns-cluster.sh"
# shellcheck source=bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"   # PROG, die, log, usage, bytes, default_reps, default_warmup

PREFIX=${NETNS_CLUSTER_PREFIX:-} NP='' IMPL=openmpi OPS='' SIZES='' REPS='' INNER=1 WARMUP=''
VALIDATE=1 OUT='' TMO='' LABEL='' RAW=0 SELFTEST=0
CELLS=() MPIRUN_ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --prefix|--p|--impl|--ops|--sizes|--reps|--inner|--warmup|--out|--timeout|--label|--mpirun-arg)
      [[ $# -ge 2 ]] || { echo "$PROG: $1 needs a value" >&2; usage; } ;;&
    --prefix) PREFIX=$2; shift 2 ;;
    --p) NP=$2; shift 2 ;;
    --impl) IMPL=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --inner) INNER=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --no-validate) VALIDATE=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    --timeout) TMO=$2; shift 2 ;;
    --label) LABEL=$2; shift 2 ;;
    --raw) RAW=1; shift ;;
    --selftest) SELFTEST=1; shift ;;
    --mpirun-arg) MPIRUN_ARGS+=("$2"); shift 2 ;;
    -h|--help) usage ;;
    -*) echo "$PROG: unknown option $1" >&2; usage ;;
    *) CELLS+=("$1"); shift ;;
  esac
done
for o in $OPS; do for s in $SIZES; do CELLS+=("$o@$s"); done; done

# compile_peer DIR: build mpi_coll (openmpi) or check the gloo python; sets PEER_CMD
compile_peer() {
  if [[ $IMPL == openmpi ]]; then
    command -v mpicc >/dev/null || die "mpicc not found (apt-get install -y openmpi-bin libopenmpi-dev)"
    command -v mpirun >/dev/null || die "mpirun not found (apt-get install -y openmpi-bin)"
    mpicc -O2 -Wall -o "$1/mpi_coll" "$ROOT/scripts/bench/mpi_coll.c" || die "mpicc failed on scripts/bench/mpi_coll.c"
  else
    GLOO_PYTHON=${GLOO_PYTHON:-python3}
    command -v "$GLOO_PYTHON" >/dev/null || die "no python $GLOO_PYTHON (set GLOO_PYTHON)"
    timeout 120 "$GLOO_PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
      die "$GLOO_PYTHON cannot import torch.distributed with gloo (pip install torch; or set GLOO_PYTHON)"
  fi
}

# local_run DIR OUT ERR ARGS...: 3 ranks on loopback (selftest)
local_run() {
  local d=$1 o=$2 e=$3 i rc=0 pids=(); shift 3
  if [[ $IMPL == openmpi ]]; then
    timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 3 --mca pml ob1 --mca btl tcp,self \
      --mca mpi_yield_when_idle 1 "$d/mpi_coll" "$@" >"$o" 2>"$e" || rc=$?
  else
    local port=$(( 30000 + RANDOM % 20000 ))
    for i in 0 1 2; do
      timeout -k 5 120 "$GLOO_PYTHON" "$ROOT/scripts/bench/gloo_coll.py" "$@" --rank "$i" --world 3 \
        --master 127.0.0.1 --port "$port" >"$o.$i" 2>"$e.$i" & pids+=($!)
    done
    for i in 0 1 2; do wait "${pids[$i]}" || { local r=$?; (( rc == 0 || rc == 1 )) && rc=$r; }; done
    cat "$o.0" >"$o"; cat "$e".? >"$e"
  fi
  return "$rc"
}

if (( SELFTEST )); then
  case $IMPL in openmpi|gloo) ;; *) die "unknown --impl '$IMPL' (openmpi, gloo)" ;; esac
  command -v jq >/dev/null || die "missing command jq"
  ST=$(mktemp -d /tmp/bench-mpi-selftest.XXXXXX); trap 'rm -rf "$ST"' EXIT
  compile_peer "$ST"
  pass=0 fail=0
  check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1" >&2; fi; }
  for op in broadcast reduce gather scatter allreduce allgather reduce-scatter; do
    for n in 8 1000 1048600; do
      rc=0; local_run "$ST" "$ST/o" "$ST/e" "$op" --bytes "$n" --reps 3 --inner 2 --warmup 1 --validate || rc=$?
      elems=$(( n / 8 ))
      check "$IMPL $op $n bytes (exit $rc: $(tail -n 2 "$ST/e" | tr '\n' ' '))" \
        "(( rc == 0 )) && jq -e --arg op '$op' --argjson n $n --argjson k $elems \
          '.op == \$op and .bytes == \$n and .elements == \$k and .workers == 3 and .reps == 3 and .inner == 2
           and .validated and .median_s > 0 and .min_s <= .median_s and .median_s <= .max_s' '$ST/o' >/dev/null"
    done
  done
  # The check itself: a wrong result on rank R must fail the run (exit 3) naming rank R.
  for c in allreduce:1 broadcast:2 gather:0 reduce-scatter:2 scatter:1; do
    op=${c%%:*} r=${c#*:} rc=0
    local_run "$ST" "$ST/o" "$ST/e" "$op" --bytes 1000 --reps 1 --validate --corrupt "$r" || rc=$?
    check "$IMPL $op --corrupt $r must fail with exit 3 naming rank $r (exit $rc)" \
      "(( rc == 3 )) && grep -q 'validation of .* failed on rank $r' '$ST/e' && ! grep -q '^{' '$ST/o'"
  done
  echo "selftest: $pass passed, $fail failed"
  (( fail == 0 )); exit
fi
[[ -n $OPS && -z $SIZES || -z $OPS && -n $SIZES ]] && die "--ops and --sizes go together"
(( ${#CELLS[@]} )) || die "no cells (give OP@SIZE arguments or --ops and --sizes)"
[[ -n $PREFIX ]] || die "--prefix is required (the prefix of a running netns-cluster.sh cluster)"
[[ $PREFIX =~ ^[A-Za-z][A-Za-z0-9_-]{0,15}$ ]] || die "bad prefix '$PREFIX'"
for v in "$NP" "$REPS" "$INNER" "$WARMUP" "$TMO"; do
  [[ -z $v || $v =~ ^[0-9]+$ ]] || die "'$v' is not a non-negative integer"
done
(( INNER >= 1 )) || die "--inner must be at least 1"
[[ -z $REPS ]] || (( REPS >= 1 )) || die "--reps must be at least 1"
case $IMPL in openmpi|gloo) ;; *) die "unknown --impl '$IMPL' (openmpi, gloo)" ;; esac
[[ $(id -u) -eq 0 ]] || die "must run as root (ip netns exec)"
for c in ip jq timeout awk; do command -v "$c" >/dev/null || die "missing command $c"; done

# The cluster: namespaces ${PREFIX}h0..h(N-1) must exist (netns-cluster.sh up).
NS_ALL=$(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -Ec "^${PREFIX}h[0-9]+\$" || true)
(( NS_ALL > 0 )) || die "no netns-cluster with prefix '$PREFIX' is up (run scripts/netns-cluster.sh up N --prefix $PREFIX first)"
HOSTS=$("$NC" hosts --prefix "$PREFIX" | grep -v '^#' | cut -d: -f1) ||
  die "netns-cluster.sh hosts --prefix $PREFIX failed; is the cluster up?"
NH=$(wc -l <<<"$HOSTS")
[[ -n $NP ]] || NP=$NH
(( NP >= 1 && NP <= NH )) || die "--p $NP but the cluster '$PREFIX' has $NH hosts"
ns() { echo "${PREFIX}h$1"; }
ip_of() { sed -n "$(( $1 + 1 ))p" <<<"$HOSTS"; }
for (( i = 0; i < NP; i++ )); do
  ip netns list | awk '{ print $1 }' | grep -qx "$(ns "$i")" || die "namespace $(ns "$i") is missing"
done
TCP_CC=$(ip netns exec "$(ns 0)" cat /proc/sys/net/ipv4/tcp_congestion_control)

TMP=$(mktemp -d /tmp/bench-mpi-netns.XXXXXX)
chmod 755 "$TMP"
PIDS=()
cleanup() {
  local st=$? pid i
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  # Anything of ours left in the cluster's namespaces (daemons of a killed mpirun).
  for (( i = 0; i < NP; i++ )); do
    for pid in $(ip netns pids "$(ns "$i")" 2>/dev/null); do
      grep -qsz "^BENCH_TMP=$TMP\$" "/proc/$pid/environ" && kill -KILL "$pid" 2>/dev/null || true
    done
  done
  rm -rf "$TMP"
  exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

compile_peer "$TMP"
if [[ $IMPL == openmpi ]]; then
  write_netns_rsh "$TMP" "$PREFIX" "$TMP"
fi

emit() { if [[ -n $OUT ]]; then echo "$1" >>"$OUT"; else echo "$1"; fi; }
[[ -z $OUT ]] || mkdir -p "$(dirname "$OUT")"

CELL_NO=0 FAILED=0
run_cell() {
  local spec=$1 op rest size reps inner warm n tmo rc=0 line err
  [[ $spec =~ ^([a-z_-]+)@([0-9]+[kmgKMG]?)(x([0-9]+))?(i([0-9]+))?$ ]] ||
    die "bad cell '$spec' (OP@SIZE[xREPS][iINNER])"
  op=${BASH_REMATCH[1]} size=${BASH_REMATCH[2]} reps=${BASH_REMATCH[4]} inner=${BASH_REMATCH[6]:-$INNER}
  case $op in
    bcast|broadcast) op=bcast ;; reduce-scatter|reduce_scatter) op=reduce_scatter ;;
    reduce|gather|scatter|allreduce|allgather) ;;
    *) die "unknown op '$op' in cell '$spec' (broadcast reduce gather scatter allreduce allgather reduce-scatter)" ;;
  esac
  n=$(bytes "$size")
  [[ -n $reps ]] || reps=${REPS:-$(default_reps "$n")}
  warm=${WARMUP:-$(default_warmup "$n")}
  # Wall-clock limit: 3x the one-by-one time (p-1)n/R at 25 Mbit/s (the slowest pair of an
  # uneven 200mbit cluster behind a 100mbit uplink), plus start-up and 0.1 s per call.
  tmo=$TMO
  [[ -n $tmo ]] || tmo=$(awk -v n="$n" -v p="$NP" -v k=$(( (reps + warm + VALIDATE) * inner )) \
    'BEGIN { t = 60 + 3 * k * (p - 1) * n * 8 / 25e6 + 0.1 * k; if (t > 1800) t = 1800; printf "%d", t }')
  CELL_NO=$((CELL_NO + 1))
  local args=("$op" --bytes "$n" --reps "$reps" --inner "$inner" --warmup "$warm")
  (( VALIDATE )) && args+=(--validate)
  local t0=$SECONDS out="$TMP/c$CELL_NO.out" errf="$TMP/c$CELL_NO.err"
  if [[ $IMPL == openmpi ]]; then
    netns_mpirun "$PREFIX" "$NP" "$TMP" "$TMP" "$tmo" "${MPIRUN_ARGS[@]}" -- \
      "$TMP/mpi_coll" "${args[@]}" >"$out" 2>"$errf" &
    PIDS=($!)
    wait "${PIDS[0]}" || rc=$?
  else
    local i pids=() rcs=() port=$(( 29500 + CELL_NO % 1000 ))
    for (( i = 0; i < NP; i++ )); do
      setsid timeout -k 5 "$tmo" ip netns exec "$(ns "$i")" env BENCH_TMP="$TMP" \
        "$GLOO_PYTHON" "$ROOT/scripts/bench/gloo_coll.py" "${args[@]}" \
        --rank "$i" --world "$NP" --master "$(ip_of 0)" --port "$port" --iface eth0 \
        >"$out.r$i" 2>"$errf.r$i" &
      pids+=($!)
    done
    PIDS=("${pids[@]}")
    for (( i = 0; i < NP; i++ )); do
      if wait "${pids[$i]}"; then rcs+=(0); else rc=$?; rcs+=("$rc"); fi
    done
    cp "$out.r0" "$out"
    for (( i = 0; i < NP; i++ )); do sed "s/^/r$i: /" "$errf.r$i"; done >"$errf"
    rc=0; for i in "${rcs[@]}"; do (( i == 0 )) || rc=$i; done
  fi
  PIDS=()
  local secs=$((SECONDS - t0))
  line=$(grep -m1 '^{' "$out" 2>/dev/null || true)
  if (( rc != 0 )) || [[ -z $line ]]; then
    err=$(tail -n 8 "$errf" | head -c 2000)
    (( rc == 124 || rc == 137 )) && err="timed out after ${tmo}s; $err"
    log "FAILED $IMPL $spec p=$NP (exit $rc): $(head -n 3 <<<"$err")"
    FAILED=$((FAILED + 1))
    emit "$(jq -cn --arg impl "$IMPL" --arg op "$op" --argjson bytes "$n" --argjson p "$NP" \
      --argjson rc "$rc" --arg err "$err" --arg spec "$spec" --argjson tmo "$tmo" --arg prefix "$PREFIX" \
      --arg lbl "$LABEL" --arg time "$(date -u +%FT%TZ)" \
      '{kind:"error", impl:$impl, op:$op, bytes:$bytes, p:$p, exit_code:$rc, cell_timeout_s:$tmo,
        stderr:$err, cell:$spec, prefix:$prefix, "label":$lbl, time:$time}')"
    return 0
  fi
  if (( RAW )); then emit "$line"; return 0; fi
  line=$(jq -c --argjson p "$NP" --arg prefix "$PREFIX" --arg cc "$TCP_CC" --arg spec "$spec" \
    --argjson secs "$secs" --arg lbl "$LABEL" --arg time "$(date -u +%FT%TZ)" \
    '. + {kind:"bench", p:$p, prefix:$prefix, tcp_cc:$cc, cell:$spec, wall_s:$secs, "label":$lbl, time:$time}' <<<"$line")
  emit "$line"
  log "$(jq -r '"\(.impl) \(.op) \(.bytes)B p=\(.p) reps=\(.reps) inner=\(.inner): median \(.median_s*1e6|round/1000) ms"' <<<"$line") [${secs}s]"
}

log "$IMPL on $NP hosts of cluster '$PREFIX' (tcp_cc $TCP_CC), ${#CELLS[@]} cells"
for c in "${CELLS[@]}"; do run_cell "$c"; done
(( FAILED == 0 )) || { log "$FAILED cell(s) failed"; exit 1; }
