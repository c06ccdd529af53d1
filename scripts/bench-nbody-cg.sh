#!/usr/bin/env bash
# bench-nbody-cg.sh - time `harp nbody` and `harp cg` on an emulated uneven network
# (scripts/netns-cluster.sh --uneven), with the network model on and off, and append one JSON
# line per run to a JSONL file (docs/apps-nbody-cg.md, "Benchmarks").  Needs root.
#
# USAGE
#   scripts/bench-nbody-cg.sh [options]
#
# OPTIONS
#   --p "4 8"            host counts; one cluster per value                     [4]
#   --rate R             per-host rate (tc syntax)                            [200mbit]
#   --uneven SEED        per-pair rates R/d, d in {1,2,4} (netns-cluster.sh up)  [3]
#   --prefix P           namespace prefix (this script owns it)                   [nb]
#   --reps N             runs of each (app, model) pair, interleaved              [3]
#   --nbody "B S"        bodies and steps of `harp nbody`                  ["8192 10"]
#   --cg "G I"           grid side and iterations of `harp cg --grid` (--max-iterations I
#                        and a tolerance it cannot reach, so every run makes I iterations)
#                                                                           ["512 40"]
#   --apps "nbody cg"    which applications; `cg-mpi` adds the same CG written with mpi4py
#                        on Open MPI (scripts/bench/cg_mpi.py: the same matrix, blocks of
#                        rows, an MPI_Allgatherv of the direction and two MPI_Allreduce dot
#                        products per iteration), one rank per host (needs mpirun:
#                        apt-get install openmpi-bin libopenmpi-dev; mpi4py and numpy are
#                        installed into a venv at $MPI_PYTHON's place, /tmp/venv-mpi)
#   --exchange E         --exchange of both apps (gather-broadcast, allgather)
#                                                                 [gather-broadcast]
#   --out FILE           JSONL to append to            [bench/netns/nbody-cg.jsonl]
#   --label TEXT         stored in every record
#
# HOW
#   For each p: `netns-cluster.sh up p --uneven SEED --prefix P`, then the network model is
#   measured once by `harp worker ... netmap` on every host (kept under
#   <dir of --out>/netmodels/nbody-cg-uneven<SEED>-p<p>.txt).  Then, --reps times, each app
#   runs with the model (`--net-model FILE --net-recalibrate=false`: the model the gather,
#   broadcast and reduce choose from, not re-measured during the runs) and without, one
#   `harp worker` per host namespace, the output in a temporary directory.  Each record is
#   rank 0's summary.json (time per step or iteration, compute and communication seconds)
#   plus app, p, model ("on"/"off"), rep, rate, uneven seed, commit and time.  At the end the
#   medians per (app, p, model) and the gain of "on" over "off" are printed.
#
# Every wait is bounded (`timeout`), and the EXIT trap kills what this script started and
# tears the namespaces down.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NC="$ROOT/scripts/netns-cluster.sh"
# shellcheck source=bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"   # PROG, die, log, usage

PS_LIST=4 RATE=200mbit UNEVEN=3 PREFIX=nb REPS=3 NBODY="8192 10" CG="512 40" APPS="nbody cg"
EXCHANGE=gather-broadcast OUT="$ROOT/bench/netns/nbody-cg.jsonl" LABEL=''
while [[ $# -gt 0 ]]; do
  case $1 in
    --p|--rate|--uneven|--prefix|--reps|--nbody|--cg|--apps|--exchange|--out|--label)
      [[ $# -ge 2 ]] || { echo "$PROG: $1 needs a value" >&2; usage; } ;;&
    --p) PS_LIST=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --uneven) UNEVEN=$2; shift 2 ;;
    --prefix) PREFIX=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --nbody) NBODY=$2; shift 2 ;;
    --cg) CG=$2; shift 2 ;;
    --apps) APPS=$2; shift 2 ;;
    --exchange) EXCHANGE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --label) LABEL=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "$PROG: unknown argument $1" >&2; usage ;;
  esac
done
(( EUID == 0 )) || die "needs root (network namespaces)"
command -v jq >/dev/null || die "needs jq"
HARP_BIN=${HARP_BIN:-$ROOT/target/release/harp}
[[ -x $HARP_BIN ]] || die "no $HARP_BIN (cargo build --release -p harp-cli)"
read -r BODIES STEPS <<<"$NBODY"
read -r GRID ITERS <<<"$CG"
export HARP_SECRET=${HARP_SECRET:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD -- rust 2>/dev/null || COMMIT="$COMMIT+dirty"
TMP=$(mktemp -d /tmp/bench-nbody-cg.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT
mkdir -p "$(dirname "$OUT")/netmodels"
if [[ " $APPS " == *" cg-mpi "* ]]; then
  command -v mpirun >/dev/null || die "cg-mpi needs mpirun (apt-get install -y openmpi-bin libopenmpi-dev)"
  MPI_PYTHON=${MPI_PYTHON:-/tmp/venv-mpi/bin/python}
  if ! "$MPI_PYTHON" -c 'import mpi4py, numpy' >/dev/null 2>&1; then
    python3 -m venv "$(dirname "$(dirname "$MPI_PYTHON")")"
    "$(dirname "$MPI_PYTHON")/pip" install -q mpi4py numpy
  fi
  chmod 755 "$TMP"
  write_netns_rsh "$TMP" "$PREFIX" "$TMP"
fi

RUN=0
# on_hosts P NAME ARGS... : `harp worker ARGS` on hosts 0..P-1 of the cluster (job NAME);
# fails with the workers' errors when any fails
on_hosts() {
  local p=$1 name=$2 i ok=1 pids=()
  shift 2
  RUN=$((RUN + 1))
  local hosts="$TMP/hosts-$RUN"
  "$NC" hosts --prefix "$PREFIX" --port $(( 21000 + (RUN % 500) * 16 )) >"$hosts"
  for (( i = 0; i < p; i++ )); do
    timeout -k 5 900 ip netns exec "${PREFIX}h$i" "$HARP_BIN" worker --hosts "$hosts" --rank "$i" \
      --job "nb$$-$RUN-$name" "$@" >"$TMP/r$RUN.$i.out" 2>"$TMP/r$RUN.$i.err" &
    pids+=($!); PIDS+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || ok=0; done
  (( ok )) || { cat "$TMP"/r$RUN.*.err >&2; return 1; }
}

for p in $PS_LIST; do
  "$NC" down --prefix "$PREFIX" >/dev/null 2>&1 || true
  timeout 60 "$NC" up "$p" --rate "$RATE" --uneven "$UNEVEN" --prefix "$PREFIX" >&2 ||
    die "netns-cluster.sh up $p failed"
  model="$(dirname "$OUT")/netmodels/nbody-cg-uneven$UNEVEN-p$p.txt"
  on_hosts "$p" netmap netmap --output "$model" || die "harp netmap failed"
  log "p=$p: $(grep -m1 'measured in' "$TMP/r$RUN.0.out" || true); model in $model"
  for (( rep = 1; rep <= REPS; rep++ )); do
    for app in $APPS; do
      if [[ $app == cg-mpi ]]; then
        netns_mpirun "$PREFIX" "$p" "$TMP" "$TMP" 900 -- "$MPI_PYTHON" "$ROOT/scripts/bench/cg_mpi.py" \
          "$GRID" "$ITERS" >"$TMP/mpi.out" 2>"$TMP/mpi.err" || { cat "$TMP/mpi.err" >&2; die "cg-mpi p=$p failed"; }
        jq -c --argjson rep "$rep" --arg rate "$RATE" --argjson uneven "$UNEVEN" --arg commit "$COMMIT" \
          --arg lbl "$LABEL" --arg time "$(date -u +%FT%TZ)" \
          '{kind: "app", app: "cg-mpi", model: "openmpi", rep: $rep, rate: $rate, uneven_seed: $uneven,
            commit: $commit, "label": $lbl, time: $time} + .' "$TMP/mpi.out" >>"$OUT"
        log "cg-mpi p=$p rep $rep: $(jq -r '.iteration_s * 1000 | tostring | .[0:7]' "$TMP/mpi.out") ms per iteration"
        continue
      fi
      for m in off on; do
        margs=()
        [[ $m == on ]] && margs=(--net-model "$model" --net-recalibrate=false)
        out="$TMP/out-$app"
        case $app in
          nbody) args=(nbody --bodies "$BODIES" --steps "$STEPS") ;;
          cg) args=(cg --grid "$GRID" --max-iterations "$ITERS" --tolerance 1e-300) ;;
          *) die "unknown app $app (nbody, cg)" ;;
        esac
        on_hosts "$p" "$app-$m" "${args[@]}" --exchange "$EXCHANGE" --output "$out" --overwrite \
          --timeout 120 "${margs[@]}" || die "$app p=$p model $m failed"
        jq -c --arg app "$app" --argjson p "$p" --arg model "$m" --argjson rep "$rep" \
          --arg rate "$RATE" --argjson uneven "$UNEVEN" --arg commit "$COMMIT" --arg lbl "$LABEL" \
          --arg time "$(date -u +%FT%TZ)" \
          '{kind: "app", app: $app, p: $p, model: $model, rep: $rep, rate: $rate,
            uneven_seed: $uneven, commit: $commit, "label": $lbl, time: $time}
           + del(.per_step, .per_iteration)' "$out/summary.json" >>"$OUT"
        log "$app p=$p model $m rep $rep: $(jq -r '(.step_s // .iteration_s) * 1000 | tostring | .[0:7]' "$out/summary.json") ms per step"
      done
    done
  done
  "$NC" down --prefix "$PREFIX" >&2
done

# medians per (app, p, model) over this run's records, and the gain of the model
jq -rs --arg commit "$COMMIT" '
  [.[] | select(.kind == "app" and .commit == $commit)]
  | group_by([.app, .p]) | .[]
  | (.[0].app) as $app | (.[0].p) as $p
  | def med: sort | .[(length - 1) / 2 | floor];
    if $app == "cg-mpi" then
      "\($app) p=\($p): \([.[] | .iteration_s] | med * 1000 | floor) ms per iteration; comm \([.[] | .comm_s] | med | . * 100 | round / 100) s"
    else
    ([.[] | select(.model == "off") | (.step_s // .iteration_s)] | med) as $off
  | ([.[] | select(.model == "on") | (.step_s // .iteration_s)] | med) as $on
  | ([.[] | select(.model == "off") | .comm_s] | med) as $coff
  | ([.[] | select(.model == "on") | .comm_s] | med) as $con
  | "\($app) p=\($p): off \($off * 1000 | floor) ms, on \($on * 1000 | floor) ms per step/iteration; gain \((1 - $on / $off) * 1000 | round / 10) %; comm \($coff | . * 100 | round / 100) s -> \($con | . * 100 | round / 100) s"
    end
' "$OUT"
