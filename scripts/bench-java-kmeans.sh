#!/usr/bin/env bash
# The Java K-means example (`hadoop jar harp-rs-examples.jar kmeans`, local mode: one JVM, every
# worker a map task) against `harp kmeans` (one process per worker) on the same data, workers
# and threads, runs interleaved (harp, java, harp, java, …).
#   scripts/bench-java-kmeans.sh [N] [THREADS] [ITERATIONS] [REPS]     (defaults 200000 1 20 2)
#   WORKERS=2 DIM=32 K=256 PRECISION=f64 BENCH_DIR=target/bench-java-kmeans
# Needs `cargo build --release` and `java/build.sh`. Per run it prints:
#   median s/it, mean s/it  compute + allreduce per iteration, iterations 2..ITERATIONS, from the
#                           run's summary.json (both tools time iterations with the same engine code)
#   kernel CPU s/it         CPU seconds of the kernel threads (harp-kmeans-N) of all workers per
#                           iteration: unlike the times, insensitive to other processes taking the
#                           cores (sampled every 20 ms: ± 0.02 s per thread over the run)
#   wall s                  the whole command
#   max RSS MB              /usr/bin/time -v: the largest single process (a harp worker; the JVM)
#   tree RSS MB             peak total RSS of the process tree (harp: launcher + workers)
# then per tool the median of its per-run medians, and the best run, with the Java / harp ratios
# (medians: on a shared machine other processes' bursts land on random iterations).
#
#   scripts/bench-java-kmeans.sh marginal [N] [ROUNDS] [LO] [HI]       (defaults 200000 4 5 25)
# measures instead the marginal cost of an iteration, (T_HI - T_LO) / (HI - LO) with T the wall
# time of a whole run (start-up, loading and the end cancel out), both tools at their defaults
# (`harp kmeans --workers W`, the Java example without -D options but the framework). Each round
# runs harp LO, java LO, harp HI, java HI (the next round starts with java). Per run it prints
# the wall time, the sum of the iteration times of summary.json and the load average; per round
# each tool's marginal cost, whole-run and in-engine (the iteration times alone), and the
# Java / harp ratios; at the end the median ratio, the ratio of the mean marginal costs, and the
# marginal costs from the fastest and from the median run of each kind. GROUP_NICE=-20 runs each
# command in a scheduling group of its own at that nice value (Linux autogroups; below 0 needs
# root): on a machine shared with other jobs, the runs then get the cores as on a quiet one.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=report
if [[ ${1:-} == marginal ]]; then
  MODE=marginal
  shift
fi
N=${1:-200000}
if [[ $MODE == marginal ]]; then
  ROUNDS=${2:-4}
  LO=${3:-5}
  HI=${4:-25}
else
  T=${2:-1}
  IT=${3:-20}
  REPS=${4:-2}
fi
W=${WORKERS:-2}
DIM=${DIM:-32}
K=${K:-256}
PRECISION=${PRECISION:-f64}
HARP=target/release/harp
JAR=target/java/harp-rs-examples.jar
if [[ ! -x $HARP || ! -f $JAR ]]; then
  echo "build first: cargo build --release && java/build.sh" >&2
  exit 2
fi
D=${BENCH_DIR:-target/bench-java-kmeans}/n$N-d$DIM-k$K
if [[ ! -f $D/init.txt ]]; then
  $HARP gen points --n "$N" --dim "$DIM" --seed 7 --init "$K" --files 4 --output "$D" > /dev/null
fi
if [[ $MODE == marginal ]]; then
  # One run: prints "wall_s iterations_s" (iterations_s: the sum of compute + allreduce over the
  # run's iterations, from its summary.json).
  whole_run() {
    local tool=$1 it=$2 out=$D/out-marginal
    rm -rf "$out"
    local t0 t1
    t0=$(date +%s.%N)
    local run=()
    if [[ -n ${GROUP_NICE:-} ]]; then
      # shellcheck disable=SC2016
      run=(setsid sh -c 'echo "$0" > /proc/self/autogroup && exec "$@"' "$GROUP_NICE")
    fi
    if [[ $tool == harp ]]; then
      "${run[@]}" $HARP kmeans --workers "$W" --input "$D/points" --init "$D/init.txt" --iterations "$it" \
        --output "$out" > "$D/marginal.log" 2>&1
    else
      "${run[@]}" scripts/hadoop jar $JAR kmeans -Dmapreduce.framework.name=map-collective \
        "$D/points" "$D/init.txt" "$out" "$it" "$W" > "$D/marginal.log" 2>&1
    fi || { cat "$D/marginal.log" >&2; exit 1; }
    t1=$(date +%s.%N)
    python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert len(s["iterations"]) == int(sys.argv[4]), "iterations in summary.json"
print("%.3f %.4f" % (float(sys.argv[3]) - float(sys.argv[2]),
                     sum(i["compute_s"] + i["comm_s"] for i in s["iterations"])))' \
      "$out/summary.json" "$t0" "$t1" "$it"
    rm -rf "$out"
  }
  echo "# marginal cost per iteration, $N x $DIM, k=$K, $W workers, defaults, runs of $LO and $HI iterations," \
    "$(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), $(nproc) cores${GROUP_NICE:+, group nice $GROUP_NICE}"
  printf '%-5s %-5s %-4s %8s %14s %s\n' round tool its "wall s" "iterations s" "load average (1 5 15 min)"
  results=""
  for r in $(seq 1 "$ROUNDS"); do
    order=(harp java)
    ((r % 2 == 0)) && order=(java harp)
    declare -A wall=() eng=()
    for it in $LO $HI; do
      for tool in "${order[@]}"; do
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        read -r w e <<< "$(whole_run $tool "$it")"
        printf '%-5s %-5s %-4s %8s %14s %s\n' "$r" $tool "$it" "$w" "$e" "$load"
        wall[$tool$it]=$w
        eng[$tool$it]=$e
      done
    done
    results="$results ${wall[harp$LO]},${wall[harp$HI]},${wall[java$LO]},${wall[java$HI]}"
    results="$results,${eng[harp$LO]},${eng[harp$HI]},${eng[java$LO]},${eng[java$HI]}"
  done
  python3 -c '
import statistics, sys
lo, hi = int(sys.argv[1]), int(sys.argv[2])
rounds = [list(map(float, r.split(","))) for r in sys.argv[3].split()]
m = lambda a, b: (b - a) / (hi - lo)
print("round  harp s/it  java s/it  java/harp  |  in-engine: harp s/it  java s/it  java/harp")
hs, js, ratios = [], [], []
for i, r in enumerate(rounds, 1):
    h, j, eh, ej = m(r[0], r[1]), m(r[2], r[3]), m(r[4], r[5]), m(r[6], r[7])
    hs.append(h); js.append(j); ratios.append(j / h)
    print("%-5d  %9.4f  %9.4f  %9.3f  |             %9.4f  %9.4f  %9.3f" % (i, h, j, j / h, eh, ej, ej / eh))
print("median java/harp over rounds: %.3f; mean marginal: harp %.4f  java %.4f  java/harp %.3f"
      % (statistics.median(ratios), statistics.mean(hs), statistics.mean(js), statistics.mean(js) / statistics.mean(hs)))
# Whole runs carry start-up and end delays that vary by seconds from run to run (other processes,
# timers); the fastest run of each kind is the least disturbed one.
col = lambda i: [r[i] for r in rounds]
h, j = m(min(col(0)), min(col(1))), m(min(col(2)), min(col(3)))
print("fastest runs: harp %.4f  java %.4f  java/harp %.3f" % (h, j, j / h))
h, j = m(statistics.median(col(0)), statistics.median(col(1))), m(statistics.median(col(2)), statistics.median(col(3)))
print("median runs:  harp %.4f  java %.4f  java/harp %.3f" % (h, j, j / h))
' "$LO" "$HI" "$results"
  exit 0
fi
PRECISION_HARP=()
[[ $PRECISION != f64 ]] && PRECISION_HARP=(--precision "$PRECISION")

# Runs "$@" under /usr/bin/time -v, sampling the total RSS of its process tree and the CPU time
# of its K-means kernel threads (named harp-kmeans-N, in both tools); prints
# "wall_s max_rss_kb tree_peak_kb kernel_cpu_s".
measure() {
  local tag=$1
  shift
  python3 - "$D/time-$tag" "$@" <<'EOF'
import os, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.time()
p = subprocess.Popen(["/usr/bin/time", "-v", "-o", out] + cmd, stdout=subprocess.DEVNULL,
                     stderr=open(out + ".stderr", "w"))
def tree(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    todo, seen = [root], []
    while todo:
        q = todo.pop()
        seen.append(q)
        todo += kids.get(q, [])
    return seen
peak = 0
kernel = {}
tick = os.sysconf("SC_CLK_TCK")
while p.poll() is None:
    total = 0
    for q in tree(p.pid):
        try:
            for t in os.listdir(f"/proc/{q}/task"):
                with open(f"/proc/{q}/task/{t}/stat") as f:
                    st = f.read()
                if st[st.index("(") + 1:].startswith("harp-kmeans"):
                    v = st.rsplit(")", 1)[1].split()
                    kernel[(q, t)] = max(kernel.get((q, t), 0), int(v[11]) + int(v[12]))
        except (OSError, ValueError):
            pass
        try:
            with open(f"/proc/{q}/status") as f:
                for l in f:
                    if l.startswith("VmRSS:"):
                        total += int(l.split()[1])
        except OSError:
            pass
    peak = max(peak, total)
    time.sleep(0.02)
wall = time.time() - t0
if p.returncode != 0:
    sys.stderr.write(open(out + ".stderr").read())
    sys.exit(f"failed: {' '.join(cmd)}")
rss = [l for l in open(out) if "Maximum resident set size" in l][0].split()[-1]
print(f"{wall:.2f} {rss} {peak} {sum(kernel.values()) / tick:.2f}")
EOF
}

# Median and mean of compute_s + comm_s over iterations 2.. of a summary.json.
per_iteration() {
  python3 -c '
import json, statistics, sys
t = [i["compute_s"] + i["comm_s"] for i in json.load(open(sys.argv[1]))["iterations"][1:]]
print("%.4f %.4f" % (statistics.median(t), statistics.mean(t)))' "$1"
}

echo "# $N x $DIM, k=$K, $W workers x $T threads, $IT iterations, precision $PRECISION, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
printf '%-5s %-3s %10s %10s %14s %8s %11s %12s\n' tool rep "median s/it" "mean s/it" "kernel CPU s/it" "wall s" \
  "max RSS MB" "tree RSS MB"
declare -A meds=([harp]="" [java]="")
for rep in $(seq 1 "$REPS"); do
  for tool in harp java; do
    out=$D/out-$tool-$rep
    rm -rf "$out"
    if [[ $tool == harp ]]; then
      m=$(measure "$tool-$rep" $HARP kmeans --workers "$W" --threads "$T" --input "$D/points" \
        --init "$D/init.txt" --iterations "$IT" --output "$out" "${PRECISION_HARP[@]}")
    else
      m=$(measure "$tool-$rep" scripts/hadoop jar $JAR kmeans -Dmapreduce.framework.name=map-collective \
        -Dharp.kmeans.threads="$T" -Dharp.kmeans.precision="$PRECISION" \
        "$D/points" "$D/init.txt" "$out" "$IT" "$W")
    fi
    read -r med mean <<< "$(per_iteration "$out/summary.json")"
    read -r wall rss tree kcpu <<< "$m"
    printf '%-5s %-3s %11s %10s %15.4f %8s %11d %12d\n' $tool "$rep" "$med" "$mean" "$(echo "$kcpu / $IT" | bc -l)" \
      "$wall" $((rss / 1024)) $((tree / 1024))
    meds[$tool]="${meds[$tool]} $med"
  done
done
python3 -c '
import statistics, sys
h = statistics.median(map(float, sys.argv[1].split()))
j = statistics.median(map(float, sys.argv[2].split()))
print("median s/iteration over runs: harp %.4f  java %.4f  java/harp %.3f" % (h, j, j / h))
h = min(map(float, sys.argv[1].split()))
j = min(map(float, sys.argv[2].split()))
print("best run (least disturbed):    harp %.4f  java %.4f  java/harp %.3f" % (h, j, j / h))' "${meds[harp]}" "${meds[java]}"
