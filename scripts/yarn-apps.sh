#!/usr/bin/env bash
# The Hadoop examples of harp-rs (wordcount, pagerank unweighted and weighted, components, mds,
# layout, mfsgd, lda, nbody, cg generated and from a file) on a REAL YARN +
# HDFS cluster, each compared with `harp JOB --workers W` run locally on the same input:
#   HADOOP_CONF_DIR=… scripts/yarn-apps.sh [WORKERS] [JOB…]     (default: 2, every job)
# Needs a running cluster and its own Hadoop client (`hadoop` on the PATH, or
# $HADOOP_HOME/bin/hadoop), like scripts/yarn-e2e.sh; it neither builds nor starts Hadoop.
# Generates small inputs (text, a random edge list in 3 files, the same with weights on most lines
# of two of the files, an edge list of several components, `harp gen dist`, `harp gen ratings`,
# `harp gen corpus`, `harp gen poisson`), puts them on HDFS (nbody and `cg --grid` read nothing), runs every job with
# -Dmapreduce.framework.name=map-collective and fully qualified hdfs:// input and output, fetches
# the results and compares them:
#   wordcount, components,  the same lines, in any order (mfsgd's factors and lda's document
#   mfsgd, lda, nbody, cg   mixtures: the same bytes, as a run is reproducible for a worker count;
#                           nbody's bodies and cg's solution: the same bytes for any worker count)
#   pagerank                the same vertices, ranks equal to 1e-12 relative
#   mds, layout             the same coordinates to 1e-9 relative (relative to the largest
#                           magnitude of the result, so coordinates near 0 do not flake)
# Checks the placement ("Harp-RS workers per host" counters add up to W, at most one per host
# unless EXTRA_D raises harp.yarn.workers.per.node), and that a missing input path fails with a
# message naming it (job "bad-input"). Prints one line per job: name, PASS/FAIL, seconds (the
# `hadoop jar` alone), detail; exits non-zero on any failure or mismatch.
# Environment: HARP_HDFS_DIR (default /tmp/harp-apps-$USER), EXTRA_D (more -D options, e.g.
# "-Dharp.yarn.workers.per.node=4" on one node, "-Dharp.yarn.worker.memory.mb=768"),
# SKIP_BUILD=1 (use the built jar and harp as they are), KEEP=1 (keep the HDFS data and the
# local work directory).
set -uo pipefail
cd "$(dirname "$0")/.."
die() { echo "yarn-apps: $*" >&2; exit 2; }
W=${1:-2}
shift || true
JOBS=("$@")
[[ ${#JOBS[@]} -gt 0 ]] || JOBS=(wordcount pagerank pagerank-weighted components mds layout mfsgd lda nbody cg cg-file bad-input)
[[ -n ${HADOOP_CONF_DIR:-} ]] || die "HADOOP_CONF_DIR is not set: point it at the cluster's configuration"
grep -q 'yarn.resourcemanager' "$HADOOP_CONF_DIR/yarn-site.xml" 2>/dev/null \
  || die "$HADOOP_CONF_DIR/yarn-site.xml configures no ResourceManager (the jobs would run in local mode)"
HADOOP=$(command -v hadoop || true)
if [[ -z $HADOOP && -n ${HADOOP_HOME:-} && -x $HADOOP_HOME/bin/hadoop ]]; then HADOOP=$HADOOP_HOME/bin/hadoop; fi
[[ -n $HADOOP ]] || die "no Hadoop client: put the cluster's 'hadoop' on the PATH or set HADOOP_HOME"
H=target/release/harp
JAR=target/java/harp-rs-examples.jar
HARP_HDFS_DIR=${HARP_HDFS_DIR:-/tmp/harp-apps-${USER:-harp}}
WORK=$(mktemp -d)
cleanup() {
  if [[ ${KEEP:-0} == 1 ]]; then
    echo "kept: $WORK and $HARP_HDFS_DIR on HDFS"
  else
    rm -rf "$WORK"
    "$HADOOP" fs -rm -r -f -skipTrash "$HARP_HDFS_DIR" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  echo "== build"
  bash java/build.sh >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; die "build failed"; }
fi
[[ -x $H && -f $JAR ]] || die "$H or $JAR is missing (build with java/build.sh)"

FS=$("$(dirname "$HADOOP")/hdfs" getconf -confKey fs.defaultFS 2>/dev/null | tail -n 1)
[[ $FS == hdfs://* ]] || die "fs.defaultFS is '$FS', not an hdfs:// file system"
FS=${FS%/}
D=$FS$HARP_HDFS_DIR

echo "== data"
mkdir -p "$WORK/in/text" "$WORK/in/edges" "$WORK/in/wedges" "$WORK/in/comp"
python3 - "$WORK/in" <<'EOF'
import random, sys
root = sys.argv[1]
r = random.Random(12)
words = ["alpha", "beta", "gamma", "delta", "harp", "yarn", "hdfs", "map", "collective", "rust",
         "Word", "word", "x", "y-z", "a.b", "42"] + [f"w{i}" for i in range(300)]
for f in range(3):
    with open(f"{root}/text/part-{f}.txt", "w") as out:
        for _ in range(4000):
            out.write(" ".join(r.choice(words) for _ in range(r.randrange(0, 12))) + "\n")
for f in range(3):  # a random directed graph, 600 vertices, 3 files
    with open(f"{root}/edges/edges-{f}.txt", "w") as out, \
            open(f"{root}/wedges/edges-{f}.txt", "w") as wout:
        for i in range(2000):
            a, b = r.randrange(600), r.randrange(600)
            out.write(f"{a} {b}\n")
            # the same edges weighted, but for the first file and every fifth line
            w = "" if f == 0 or i % 5 == 0 else f" {r.randrange(1, 80) / 8}"
            wout.write(f"{a} {b}{w}\n")
with open(f"{root}/comp/edges.txt", "w") as out:  # several components: blocks of 50 vertices
    for b in range(8):
        for _ in range(70):
            out.write(f"{b * 50 + r.randrange(50)} {b * 50 + r.randrange(50)}\n")
    out.write("1000 1001\n1001 1002\n")
EOF
$H gen dist --n 120 --dim 3 --seed 3 --output "$WORK/in/dist.txt" >/dev/null || die "harp gen dist failed"
$H gen ratings --users 2000 --items 500 --ratings 60000 --seed 4 --output "$WORK/in/ratings.txt" \
  --test "$WORK/in/ratings-test.txt" >/dev/null || die "harp gen ratings failed"
$H gen corpus --docs 600 --vocabulary 2000 --topics 10 --length 50 --seed 5 --output "$WORK/in/corpus.txt" \
  >/dev/null || die "harp gen corpus failed"
$H gen poisson --grid 48 --output "$WORK/in/poisson.txt" >/dev/null || die "harp gen poisson failed"
"$HADOOP" fs -rm -r -f -skipTrash "$HARP_HDFS_DIR" >/dev/null 2>&1
"$HADOOP" fs -mkdir -p "$HARP_HDFS_DIR" || die "cannot create $HARP_HDFS_DIR on HDFS"
"$HADOOP" fs -put "$WORK/in/text" "$WORK/in/edges" "$WORK/in/wedges" "$WORK/in/comp" "$WORK/in/dist.txt" \
  "$WORK/in/ratings.txt" "$WORK/in/ratings-test.txt" "$WORK/in/corpus.txt" "$WORK/in/poisson.txt" "$HARP_HDFS_DIR/" \
  || die "cannot put the inputs on HDFS"

results=()
failed=0
record() { # name ok(0/1) seconds detail
  local verdict=PASS
  [[ $2 -eq 0 ]] || { verdict=FAIL; failed=$((failed + 1)); }
  results+=("$(printf '%-17s %s %6s s  %s' "$1" "$verdict" "$3" "$4")")
  echo "== $1: $verdict ($3 s) $4"
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

placement() { # job log → "" if fine, else the problem; prints the hosts to $WORK/hosts
  awk '/Harp-RS workers per host/{on=1; next} on && /=/{print; next} on{on=0}' "$1" >"$WORK/hosts"
  [[ -s $WORK/hosts ]] || { echo "no 'Harp-RS workers per host' counters"; return; }
  local placed
  placed=$(awk -F= '{s+=$2} END{print s}' "$WORK/hosts")
  [[ $placed -eq $W ]] || { echo "$placed workers counted on hosts, $W expected"; return; }
  if [[ ${EXTRA_D:-} != *workers.per.node* ]] && awk -F= '$2+0 > 1' "$WORK/hosts" | grep -q .; then
    echo "more than one worker on a host"
  fi
}
hosts_line() { tr -d ' \t' <"$WORK/hosts" | tr '\n' ' '; }

compare() { # kind local-dir yarn-dir → prints the verdict, exit 0 if equal
  python3 - "$@" <<'EOF'
import glob, os, sys
kind, want_dir, got_dir = sys.argv[1:4]
def parts(d):
    lines = []
    for p in sorted(glob.glob(os.path.join(d, "part-*"))):
        lines += [l for l in open(p).read().splitlines() if l.strip()]
    return lines
if not os.path.exists(os.path.join(got_dir, "_SUCCESS")):
    sys.exit("no _SUCCESS in the job's output")
if kind == "lines":
    want, got = sorted(parts(want_dir)), sorted(parts(got_dir))
    if not want:
        sys.exit("harp wrote no lines")
    if want != got:
        sys.exit(f"lines differ: {len(got)} from the job, {len(want)} from harp, "
                 f"{len(set(got) ^ set(want))} distinct lines in only one of them")
    print(f"{len(want)} lines identical")
    sys.exit(0)
if kind == "mds":
    read = lambda d: [[float(x) for x in l.split()] for l in open(os.path.join(d, "coords.txt")) if l.strip()]
    want, got = {i: v for i, v in enumerate(read(want_dir))}, {i: v for i, v in enumerate(read(got_dir))}
    tol = 1e-9
else:
    def read(d):
        m = {}
        for l in parts(d):
            f = l.split()
            m[int(f[0])] = [float(x) for x in f[1:]]
        return m
    want, got = read(want_dir), read(got_dir)
    tol = 1e-12 if kind == "pagerank" else 1e-9
    if kind == "pagerank" and len(sys.argv) > 4:  # weighted: the ranks must differ from these
        plain = read(sys.argv[4])
        if plain and all(abs(plain[k][0] - v[0]) <= 1e-9 * abs(v[0]) for k, v in want.items() if k in plain):
            sys.exit("the weighted ranks equal the unweighted ones: the weights were ignored")
if not want:
    sys.exit("harp wrote nothing")
if set(want) != set(got):
    sys.exit(f"{len(got)} keys from the job, {len(want)} from harp, {len(set(got) ^ set(want))} in only one")
scale = max(abs(x) for v in want.values() for x in v) or 1.0
worst = 0.0
for k, w in want.items():
    g = got[k]
    if len(g) != len(w):
        sys.exit(f"key {k}: {len(g)} values from the job, {len(w)} from harp")
    for a, b in zip(g, w):
        worst = max(worst, abs(a - b) / max(abs(b), scale))
print(f"{len(want)} rows, largest relative difference {worst:.3g} (limit {tol:g})")
sys.exit(0 if worst <= tol else 1)
EOF
}

run_job() { # name kind local-args… -- yarn-args…
  local name=$1 kind=$2
  shift 2
  local largs=() yargs=()
  while [[ $1 != -- ]]; do largs+=("$1"); shift; done
  shift
  yargs=("$@")
  if ! $H "${largs[@]}" >"$WORK/$name.local.log" 2>&1; then
    record "$name" 1 0 "harp ${largs[0]} failed locally: $(tail -n 1 "$WORK/$name.local.log")"
    return
  fi
  local t0 secs
  t0=$(now)
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" "${yargs[0]}" -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} "${yargs[@]:1}" \
    >"$WORK/$name.job.log" 2>&1
  local rc=$?
  secs=$(since "$t0")
  if [[ $rc -ne 0 ]]; then
    record "$name" 1 "$secs" "the job failed (exit $rc): $(grep -m1 -E 'failed|Exception|Error' "$WORK/$name.job.log" | cut -c1-400)"
    return
  fi
  local where
  where=$(placement "$WORK/$name.job.log")
  if [[ -n $where ]]; then
    record "$name" 1 "$secs" "placement: $where"
    return
  fi
  rm -rf "$WORK/$name.yarn"
  "$HADOOP" fs -get "$D/out-$name" "$WORK/$name.yarn" 2>/dev/null || { record "$name" 1 "$secs" "cannot fetch $D/out-$name"; return; }
  local verdict
  local plain=()
  [[ $name == pagerank-weighted && -d $WORK/pagerank.local ]] && plain=("$WORK/pagerank.local")
  if verdict=$(compare "$kind" "$WORK/$name.local" "$WORK/$name.yarn" "${plain[@]}" 2>&1); then
    record "$name" 0 "$secs" "equal to harp: $verdict; workers per host: $(hosts_line)"
  else
    record "$name" 1 "$secs" "differs from harp: $verdict"
  fi
}

I=$WORK/in
for job in "${JOBS[@]}"; do
  case $job in
    wordcount)
      run_job wordcount lines wordcount --workers "$W" --input "$I/text" --output "$WORK/wordcount.local" \
        -- wordcount "$D/text" "$D/out-wordcount" "$W" ;;
    pagerank)
      run_job pagerank pagerank pagerank --workers "$W" --input "$I/edges" --iterations 10 --output "$WORK/pagerank.local" \
        -- pagerank --workers "$W" --input "$D/edges" --iterations 10 --output "$D/out-pagerank" ;;
    pagerank-weighted)
      run_job pagerank-weighted pagerank pagerank --workers "$W" --input "$I/wedges" --iterations 10 \
        --output "$WORK/pagerank-weighted.local" \
        -- pagerank --workers "$W" --input "$D/wedges" --iterations 10 --output "$D/out-pagerank-weighted" ;;
    components)
      run_job components lines components --workers "$W" --input "$I/comp" --output "$WORK/components.local" \
        -- components --workers "$W" --input "$D/comp" --output "$D/out-components" ;;
    mds)
      run_job mds mds mds --workers "$W" --input "$I/dist.txt" --dim 2 --iterations 10 --output "$WORK/mds.local" \
        -- mds --workers "$W" --input "$D/dist.txt" --dim 2 --iterations 10 --output "$D/out-mds" ;;
    layout)
      run_job layout layout layout --workers "$W" --input "$I/edges" --iterations 10 --output "$WORK/layout.local" \
        -- layout --workers "$W" --input "$D/edges" --iterations 10 --output "$D/out-layout" ;;
    mfsgd)
      run_job mfsgd lines mfsgd --workers "$W" --input "$I/ratings.txt" --test "$I/ratings-test.txt" --epochs 5 \
        --output "$WORK/mfsgd.local" \
        -- mfsgd --workers "$W" --input "$D/ratings.txt" --test "$D/ratings-test.txt" --epochs 5 --output "$D/out-mfsgd" ;;
    lda)
      run_job lda lines lda --workers "$W" --input "$I/corpus.txt" --topics 10 --iterations 10 --output "$WORK/lda.local" \
        -- lda --workers "$W" --input "$D/corpus.txt" --topics 10 --iterations 10 --output "$D/out-lda" ;;
    nbody)
      run_job nbody lines nbody --workers "$W" --bodies 2048 --steps 10 --output "$WORK/nbody.local" \
        -- nbody --workers "$W" --bodies 2048 --steps 10 --output "$D/out-nbody" ;;
    cg)
      run_job cg lines cg --workers "$W" --grid 48 --output "$WORK/cg.local" \
        -- cg --workers "$W" --grid 48 --output "$D/out-cg" ;;
    cg-file)
      run_job cg-file lines cg --workers "$W" --input "$I/poisson.txt" --output "$WORK/cg-file.local" \
        -- cg --workers "$W" --input "$D/poisson.txt" --output "$D/out-cg-file" ;;
    bad-input)
      t0=$(now)
      # shellcheck disable=SC2086
      "$HADOOP" jar "$JAR" pagerank -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} --workers "$W" \
        --input "$D/no-such-edges" --iterations 2 --output "$D/out-bad" >"$WORK/bad.log" 2>&1
      rc=$?
      secs=$(since "$t0")
      msg=$(grep -m1 -i 'does not exist' "$WORK/bad.log")
      if [[ $rc -ne 0 && $msg == *no-such-edges* ]]; then
        record bad-input 0 "$secs" "exit $rc: $msg"
      else
        record bad-input 1 "$secs" "exit $rc, message: ${msg:-none} $(tail -n 2 "$WORK/bad.log" | tr '\n' ' ')"
      fi ;;
    *) die "unknown job '$job' (wordcount pagerank pagerank-weighted components mds layout mfsgd lda nbody cg cg-file bad-input)" ;;
  esac
done

echo "== summary ($W workers)"
printf '%s\n' "${results[@]}"
[[ $failed -eq 0 ]] || { echo "yarn-apps: $failed failed"; exit 1; }
echo "yarn-apps: OK"
