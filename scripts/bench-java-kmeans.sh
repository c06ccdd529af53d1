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
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
T=${2:-1}
IT=${3:-20}
REPS=${4:-2}
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
