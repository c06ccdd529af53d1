#!/usr/bin/env bash
# End-to-end check of map-collective on a real Hadoop 3 cluster (YARN + HDFS):
#   HADOOP_CONF_DIR=/etc/hadoop/conf scripts/yarn-e2e.sh [WORKERS] [POINTS] [DIM] [K] [ITERATIONS]
# Generates points locally with `harp gen`, puts them on HDFS, runs the Java K-means example
# with -Dmapreduce.framework.name=map-collective (our client protocol, application master and
# one worker per node), fetches the centroids from HDFS and compares them with `harp kmeans` on
# the same data (relative 1e-9). Exits non-zero on any failure or mismatch.
# Needs the cluster's own Hadoop client (`hadoop` on the PATH, or $HADOOP_HOME/bin/hadoop):
# scripts/hadoop only runs `hadoop jar` and cannot talk to HDFS.
# Checks that no host ran more than one worker (counter group "Harp-RS workers per host") unless
# EXTRA_D raises harp.yarn.workers.per.node.
# Environment: HARP_HDFS_DIR (default /tmp/harp-e2e-$USER), EXTRA_D (more -D options, e.g.
# "-Dharp.yarn.workers.per.node=4" on a single-node cluster), KEEP=1 keeps the HDFS data,
# SKIP_BUILD=1 uses the built jar and harp as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "yarn-e2e: $*" >&2; exit 1; }
W=${1:-2} N=${2:-20000} D=${3:-8} K=${4:-5} I=${5:-5}
[[ -n ${HADOOP_CONF_DIR:-} ]] || die "HADOOP_CONF_DIR is not set: point it at the cluster's configuration"
for f in core-site.xml yarn-site.xml; do
  [[ -f $HADOOP_CONF_DIR/$f ]] || die "$HADOOP_CONF_DIR/$f is missing"
done
grep -q 'yarn.resourcemanager' "$HADOOP_CONF_DIR/yarn-site.xml" \
  || die "$HADOOP_CONF_DIR/yarn-site.xml configures no ResourceManager (the job would run in local mode)"
HADOOP=$(command -v hadoop || true)
if [[ -z $HADOOP && -n ${HADOOP_HOME:-} && -x $HADOOP_HOME/bin/hadoop ]]; then HADOOP=$HADOOP_HOME/bin/hadoop; fi
[[ -n $HADOOP ]] || die "no Hadoop client: put the cluster's 'hadoop' on the PATH or set HADOOP_HOME (scripts/hadoop runs only 'hadoop jar' and cannot reach HDFS)"
HARP_HDFS_DIR=${HARP_HDFS_DIR:-/tmp/harp-e2e-${USER:-harp}}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; [[ ${KEEP:-0} == 1 ]] || "$HADOOP" fs -rm -r -f -skipTrash "$HARP_HDFS_DIR" >/dev/null 2>&1 || true' EXIT

H=target/release/harp
JAR=target/java/harp-rs-examples.jar
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  echo "== build"
  bash java/build.sh >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; die "build failed"; }
fi
[[ -x $H && -f $JAR ]] || die "$H or $JAR is missing (build with java/build.sh)"

echo "== data: $N points, dim $D, k $K"
$H gen points --n "$N" --dim "$D" --seed 7 --init "$K" --files "$W" --output "$WORK/data" >/dev/null
"$HADOOP" fs -rm -r -f -skipTrash "$HARP_HDFS_DIR" >/dev/null 2>&1 || true
"$HADOOP" fs -mkdir -p "$HARP_HDFS_DIR" || die "cannot create $HARP_HDFS_DIR on HDFS"
"$HADOOP" fs -put "$WORK/data/points" "$HARP_HDFS_DIR/points" || die "cannot put the points on HDFS"
"$HADOOP" fs -put "$WORK/data/init.txt" "$HARP_HDFS_DIR/init.txt" || die "cannot put the centroids on HDFS"

echo "== reference: harp kmeans on $W local workers"
$H kmeans --workers "$W" --input "$WORK/data/points" --init "$WORK/data/init.txt" --iterations "$I" \
  --output "$WORK/rust" >/dev/null

echo "== map-collective job on YARN ($W workers)"
# shellcheck disable=SC2086
"$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} \
  "$HARP_HDFS_DIR/points" "$HARP_HDFS_DIR/init.txt" "$HARP_HDFS_DIR/out" "$I" "$W" 2>&1 | tee "$WORK/job.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || die "the job failed"
echo "== placement"
awk '/Harp-RS workers per host/{on=1; next} on && /=/{print; next} on{on=0}' "$WORK/job.log" >"$WORK/hosts"
[[ -s $WORK/hosts ]] || die "the job printed no 'Harp-RS workers per host' counters"
placed=$(awk -F= '{s+=$2} END{print s}' "$WORK/hosts")
[[ $placed -eq $W ]] || die "$placed workers counted on hosts, $W expected"
if [[ ${EXTRA_D:-} != *workers.per.node* ]] && awk -F= '$2+0 > 1' "$WORK/hosts" | grep -q .; then
  die "more than one worker on a host: $(tr -s ' \n' ' ' <"$WORK/hosts")"
fi
echo "workers per host: $(tr -s ' \t\n' ' ' <"$WORK/hosts" | sed 's/^ //; s/ $//')"
"$HADOOP" fs -get "$HARP_HDFS_DIR/out/centroids.txt" "$WORK/java.txt" || die "no centroids in $HARP_HDFS_DIR/out"

echo "== compare"
scripts/same-values.py "$WORK/rust/centroids.txt" "$WORK/java.txt" || die "centroids differ from harp kmeans"
echo "yarn-e2e: OK"
