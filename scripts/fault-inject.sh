#!/usr/bin/env bash
# Fault injection on the embedded local cluster: N trials of a W-worker job (`harp check`, or
# `harp bench broadcast|allreduce` with a random size) with --timeout T. In each trial, at a
# random time after the workers have started, a random worker gets SIGKILL or SIGSTOP, or the
# launcher gets SIGKILL or SIGTERM. Counted per trial:
#   * every surviving worker failed (its error line "harp: error: rank r: ..." is there);
#   * the time from the fault until the last survivor exited, against the timeout;
#   * every survivor's message names the victim ("rank V");
#   * processes left over once the launcher has exited (a stopped worker is killed by the
#     launcher after timeout + 5 s; that wait is not counted as a survivor's time to fail).
# For a launcher fault every worker must be gone within 5 s.
#
# Then two start-up cases (SCALE=0 skips them):
#   * SCALE workers (default 160) start and run a barrier (`harp bench barrier --json`): wall
#     time and the connections rank 0 and the others hold (they open on first use);
#   * a stranger floods rank 0's port with idle and closed connections (python3) while a
#     4-worker job starts from a hosts file: every worker must succeed.
#
# Usage: scripts/fault-inject.sh [TRIALS=40] [WORKERS=4] [TIMEOUT=10]
# Environment: HARP (the harp binary, default target/release/harp), SEED (for $RANDOM),
# KEEP=1 keeps the per-trial logs in $OUT (default a fresh temporary directory), SCALE.
set -u
TRIALS=${1:-40}
W=${2:-4}
T=${3:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HARP=${HARP:-$ROOT/target/release/harp}
OUT=${OUT:-$(mktemp -d /tmp/harp-fault-XXXXXX)}
mkdir -p "$OUT"
RANDOM=${SEED:-$$}
[ -x "$HARP" ] || { echo "no harp binary at $HARP (cargo build --release -p harp-cli)" >&2; exit 2; }

now() { date +%s.%N; }
# The running (not zombie) pids among the arguments.
alive() { for p in "$@"; do
    st=$(awk '{sub(/.*\) /, ""); print $1}' /proc/"$p"/stat 2>/dev/null) || continue
    [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ] && echo "$p"
done; }
# The worker pids of launcher $1, as "rank pid" lines.
workers_of() {
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        pp=$(awk '{sub(/.*\) /, ""); print $2}' "$d/stat" 2>/dev/null) || continue
        [ "$pp" = "$1" ] || continue
        r=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null | sed -n 's/.*--rank \([0-9]*\).*/\1/p')
        [ -n "$r" ] && echo "$r $p"
    done
}

trials=0 all_failed=0 named=0 leftovers=0 max_fail=0 launcher_ok=0 launcher_trials=0
worker_trials=0 max_launcher=0
declare -A by_fault
for i in $(seq 1 "$TRIALS"); do
    case $((RANDOM % 3)) in
        0) job=(check --rounds 100000 --max-elems 20000) ;;
        1) sizes=(4k 64k 1m 16m 64m); job=(bench broadcast --reps 1000000 --bytes "${sizes[RANDOM % 5]}") ;;
        *) sizes=(4k 64k 1m 16m 64m); job=(bench allreduce --reps 1000000 --bytes "${sizes[RANDOM % 5]}") ;;
    esac
    desc="${job[0]}"; [ "${job[0]}" = bench ] && desc="bench ${job[1]} ${job[@]: -1}"
    log=$OUT/trial-$i.log
    "$HARP" "${job[0]}" --workers "$W" --timeout "$T" "${job[@]:1}" >/dev/null 2>"$log" &
    L=$!
    declare -A pid=()
    for _ in $(seq 1 600); do
        mapfile -t lines < <(workers_of "$L")
        [ "${#lines[@]}" -eq "$W" ] && break
        sleep 0.05
    done
    for l in "${lines[@]}"; do pid[${l% *}]=${l#* }; done
    if [ "${#pid[@]}" -ne "$W" ]; then echo "trial $i: workers did not start" >&2; kill -9 "$L"; continue; fi
    sleep "$(awk -v r=$RANDOM 'BEGIN{printf "%.2f", 0.3 + 3.0 * r / 32768}')"
    trials=$((trials + 1))
    if [ $((RANDOM % 5)) -eq 0 ]; then
        # The launcher.
        sig=$([ $((RANDOM % 2)) -eq 0 ] && echo KILL || echo TERM)
        fault="launcher-$sig"
        launcher_trials=$((launcher_trials + 1))
        t0=$(now); kill -s "$sig" "$L"
        left=""
        for _ in $(seq 1 100); do left=$(alive "${pid[@]}"); [ -z "$left" ] && break; sleep 0.05; done
        dt=$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.2f", b - a}')
        wait "$L" 2>/dev/null
        if [ -z "$left" ]; then launcher_ok=$((launcher_ok + 1)); else
            leftovers=$((leftovers + $(echo "$left" | wc -w))); kill -9 $left 2>/dev/null; fi
        max_launcher=$(awk -v a="$max_launcher" -v b="$dt" 'BEGIN{print (b > a ? b : a)}')
        echo "trial $i $desc $fault: workers gone after ${dt}s${left:+, LEFT: $left}"
    else
        v=$((RANDOM % W))
        sig=$([ $((RANDOM % 2)) -eq 0 ] && echo KILL || echo STOP)
        fault="worker-$sig"
        worker_trials=$((worker_trials + 1))
        surv=(); for r in "${!pid[@]}"; do [ "$r" != "$v" ] && surv+=("${pid[$r]}"); done
        t0=$(now); kill -s "$sig" "${pid[$v]}"
        for _ in $(seq 1 $((T * 40 + 400))); do [ -z "$(alive "${surv[@]}")" ] && break; sleep 0.05; done
        dt=$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.2f", b - a}')
        wait "$L" 2>/dev/null
        sleep 0.2
        left=$(alive "$L" "${pid[@]}")
        if [ -n "$left" ]; then leftovers=$((leftovers + $(echo "$left" | wc -w))); kill -9 $left 2>/dev/null; fi
        ok=1 nm=1
        for r in "${!pid[@]}"; do
            [ "$r" = "$v" ] && continue
            line=$(grep -m1 "^harp: error: rank $r:" "$log")
            [ -z "$line" ] && { ok=0; nm=0; continue; }
            echo "$line" | grep -q "rank $v\b" || nm=0
        done
        all_failed=$((all_failed + ok)); named=$((named + nm))
        max_fail=$(awk -v a="$max_fail" -v b="$dt" 'BEGIN{print (b > a ? b : a)}')
        echo "trial $i $desc $fault rank $v: survivors failed after ${dt}s, all failed=$ok, named=$nm${left:+, LEFT: $left}"
        [ "$ok$nm" = 11 ] || sed 's/^/    /' "$log" | cut -c1-300
    fi
    by_fault[$fault]=$(( ${by_fault[$fault]:-0} + 1 ))
    unset pid
done
echo
echo "== $trials trials, $W workers, --timeout $T =="
echo "faults: $(for k in "${!by_fault[@]}"; do printf '%s=%s ' "$k" "${by_fault[$k]}"; done)"
echo "worker faults: $worker_trials; every survivor failed: $all_failed; every survivor named the victim: $named; slowest last survivor: ${max_fail}s (timeout ${T}s)"
echo "launcher faults: $launcher_trials; all workers gone within 5 s: $launcher_ok; slowest: ${max_launcher}s"
echo "leftover processes: $leftovers"

SCALE=${SCALE:-160}
if [ "$SCALE" -gt 0 ]; then
    t0=$(now)
    j=$("$HARP" bench barrier --workers "$SCALE" --reps 1 --json --timeout 60 2>"$OUT/scale.log" | tail -1)
    dt=$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.2f", b - a}')
    if [ -n "$j" ]; then
        echo "start-up of $SCALE workers and a barrier: ${dt}s; connections $(echo "$j" |
            sed 's/.*"connections_max_others":\([0-9.]*\).*"connections_mean":\([0-9.]*\).*"connections_rank0":\([0-9.]*\).*/rank 0 \3, others at most \1, mean \2/')"
    else
        echo "start-up of $SCALE workers FAILED after ${dt}s:"; sed 's/^/    /' "$OUT/scale.log" | cut -c1-300 | head -20
    fi
    if command -v python3 >/dev/null; then
        base=$((20000 + RANDOM % 30000))
        hosts=$OUT/flood-hosts
        for r in 0 1 2 3; do echo "127.0.0.1:$((base + r))"; done > "$hosts"
        # The stranger: idle connections (up to 1000 kept) and as many closed at once.
        python3 - "$base" <<'PY' &
import socket, sys, time, collections
port, idle, until = int(sys.argv[1]), collections.deque(), time.time() + 120
while time.time() < until:
    for keep in (True, False):
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=1)
        except OSError:
            time.sleep(0.001)
            continue
        if keep:
            idle.append(c)
            if len(idle) > 1000:
                idle.popleft().close()
        else:
            c.close()
PY
        F=$!
        pids=()
        for r in 0 1 2 3; do
            HARP_SECRET=flood-test-secret-0123456789 HARP_LOG=error "$HARP" worker --hosts "$hosts" \
                --rank $r --job flood bench allreduce --bytes 1k --reps 3 --timeout 60 \
                >/dev/null 2>"$OUT/flood-$r.log" &
            pids+=($!)
            [ $r = 0 ] && sleep 1
        done
        t0=$(now) okc=0
        for p in "${pids[@]}"; do wait "$p" && okc=$((okc + 1)); done
        dt=$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.2f", b - a}')
        kill "$F" 2>/dev/null; wait "$F" 2>/dev/null
        echo "4-worker job beside a connection flood on rank 0: $okc of 4 workers succeeded in ${dt}s"
        [ "$okc" = 4 ] || cat "$OUT"/flood-*.log | cut -c1-300 | head -20
    fi
fi
echo "logs: $OUT"
[ "${KEEP:-0}" = 1 ] || rm -rf "$OUT"
