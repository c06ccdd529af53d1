#!/usr/bin/env bash
# Failure and control scenarios of map-collective jobs on a REAL YARN + HDFS cluster whose
# NodeManagers run on this machine (one host, or hosts in network namespaces: the scenarios find
# the worker and master JVMs of the job they started by the CONTAINER_ID in each process's
# environment, and kill those PIDs only; no other process is touched).
#   HADOOP_CONF_DIR=… scripts/yarn-scenarios.sh [SCENARIO…]      (default: all but restarted-nm, kill-nm, kill-nm-silent and master-node-lost, which need commands that act on a node)
# Scenarios:
#   kmeans2 kmeans3  K-means with 2 / 3 workers, hdfs:// in and out, equal to harp kmeans (1e-9),
#                    at most one worker per host (scripts/yarn-e2e.sh)
#   gang             one worker more than the cluster has nodes: fails with the gang diagnostic
#   kill-worker      kill -9 of worker 1 mid-job: FAILED within 5 s, the diagnostic names worker 1
#   kill-master      kill -9 of the application master of a job with one master attempt
#                    (-Dharp.yarn.am.max.attempts=1): workers gone, staging directory removed
#   am-restart       K-means with checkpoints (-Dharp.checkpoint.every); kill -9 of the application
#                    master after the first complete checkpoint: YARN starts attempt 2, its workers
#                    resume from the checkpoint, the job succeeds and its centroids are
#                    bit-identical to the same job run without interruption
#   am-restart-pagerank  the same for PageRank, an engine job (`--checkpoint-every`): attempt 2's
#                    workers are started with --resume and its ranks are byte-identical to an
#                    uninterrupted run's
#   am-restart-mfsgd, am-restart-lda  the same for MF-SGD (400 epochs, checkpoints every 40) and
#                    LDA (200 iterations, every 20): part files byte-identical
#   mapred-kill      `mapred job -kill` (the cluster's own client, framework yarn): KILLED within
#                    5 s, nothing committed, staging directory removed
#   yarn-kill        `yarn application -kill`: the same
#   bad-input        an input path that does not exist: a clear error naming it
#   bad-init         a centroids file that does not exist: a clear error naming it, blaming worker 0
#   subdir-input     an input directory holding a subdirectory: refused by the client before any
#                    application is submitted, naming the subdirectory
#   rerun-killed     `yarn application -kill` of a K-means job, then the same command again: it
#                    runs (the killed job left neither _temporary nor its output directory)
#   kill-nm          kill -9 of the NodeManager process of worker 1's node ($NM_KILL_CMD HOST);
#                    its containers run on: the job must end SUCCEEDED when the workers report
#                    their results, not after YARN's lost-node expiry; $NM_START_CMD HOST restarts it
#   kill-nm-silent   the same, and worker 1 stopped (SIGSTOP) so that it never reports: FAILED
#                    naming worker 1 within the collective timeout ($NM_SILENT_TIMEOUT_MS, 20000)
#   master-node-lost every process of the application master's node killed ($NODE_KILL_CMD HOST:
#                    NodeManager and containers) under a 2-worker K-means job with checkpoints:
#                    YARN starts attempt 2 once it notices (its AM expiry), which must place its
#                    workers on the nodes running then and succeed; $NODE_START_CMD HOST restores
#   restarted-nm     runs $RESTART_NM_CMD (a command that restarts one NodeManager on a new port
#                    without a clean shutdown, so the ResourceManager lists its host twice as
#                    RUNNING until the old NodeId expires), then a job with one worker per listed
#                    NodeId (must fail with the gang diagnostic, not crash) and K-means on every node
# Prints one line per scenario: name, PASS/FAIL, seconds, detail; exits non-zero if any failed.
# Times are measured from the kill (or the start of the kill command) to the application's final
# state as the ResourceManager's REST API reports it (polled every 0.1 s). A kill command's time
# includes its JVM's start-up; the script also times the same client doing nothing (`-list`) and
# judges the difference ("net") against the 5 s limit.
# Environment: HARP_HDFS_DIR (default /tmp/harp-scenarios-$USER), EXTRA_D (more -D options),
# RM_WEB (host:port of the ResourceManager's web service; default from yarn-site.xml),
# SKIP_BUILD=1 (use the built jar and harp as they are; passed on to scripts/yarn-e2e.sh).
# (Not HDFS_DIR: Hadoop's own launcher scripts use that name.)
set -uo pipefail
cd "$(dirname "$0")/.."
die() { echo "yarn-scenarios: $*" >&2; exit 2; }
[[ -n ${HADOOP_CONF_DIR:-} ]] || die "HADOOP_CONF_DIR is not set"
HADOOP=$(command -v hadoop || true)
[[ -n $HADOOP ]] || { [[ -n ${HADOOP_HOME:-} ]] && HADOOP=$HADOOP_HOME/bin/hadoop; }
[[ -x ${HADOOP:-} ]] || die "no Hadoop client on the PATH (or HADOOP_HOME)"
BIN=$(dirname "$HADOOP")
YARN=$BIN/yarn MAPRED=$BIN/mapred
HARP_HDFS_DIR=${HARP_HDFS_DIR:-/tmp/harp-scenarios-${USER:-harp}}
WORK=$(mktemp -d)
JAR=target/java/harp-rs-examples.jar
H=target/release/harp
CLIENTS=()
trap 'for c in "${CLIENTS[@]}"; do kill "$c" 2>/dev/null; done; rm -rf "$WORK"' EXIT
results=()
failed=0

record() { # name ok(0/1) seconds detail
  local verdict=PASS
  [[ $2 -eq 0 ]] || { verdict=FAIL; failed=$((failed + 1)); }
  results+=("$(printf '%-12s %s %6.1f s  %s' "$1" "$verdict" "$3" "$4")")
  echo "== $1: $verdict (${3} s) $4"
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
nodes() { "$YARN" node -list 2>/dev/null | awk '/RUNNING/{print $1}' | sed 's/:.*//' | sort -u | wc -l; }
# The PIDs of application $1's container processes whose command line matches $2: found by the
# CONTAINER_ID (container_[eN_]CLUSTERTS_APPSEQ_…) in each candidate's environment.
app_pids() {
  local want=${1#application_} p
  for p in $(pgrep -f "$2"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qE "^CONTAINER_ID=container_(e[0-9]+_)?${want}_" && echo "$p"
  done
}
# The NodeManager host of process $1 (NM_HOST in its environment).
host_of_pid() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^NM_HOST=//p'; }
# The JVM (not its shell) of worker $2 of application $1.
worker_pid() { app_pids "$1" "^[^ ]*java .*harp.yarn.WorkerMain job.xml $2 " | head -n 1; }
app_of() { sed -n 's/.*Submitted application \(application_[0-9_]*\).*/\1/p' "$1" | head -n 1; }
RM_WEB=${RM_WEB:-$(python3 -c '
import sys, xml.etree.ElementTree as ET
p = {e.findtext("name"): e.findtext("value") for e in ET.parse(sys.argv[1]).getroot().iter("property")}
host = p.get("yarn.resourcemanager.hostname", "0.0.0.0")
print(p.get("yarn.resourcemanager.webapp.address", host + ":8088").replace("${yarn.resourcemanager.hostname}", host))
' "$HADOOP_CONF_DIR/yarn-site.xml")}
app_json() { curl -sf --max-time 5 "http://$RM_WEB/ws/v1/cluster/apps/$1"; }
state_of() { app_json "$1" | python3 -c 'import json,sys; a=json.load(sys.stdin)["app"]; print(a["state"]+"/"+a["finalStatus"])' 2>/dev/null; }
diag_of() { app_json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["app"]["diagnostics"].replace("\n"," | "))' 2>/dev/null; }
staging_of() { # the job directory of application $1 on HDFS
  local job=${1/application_/job_} user=${HADOOP_USER_NAME:-${USER:-root}}
  echo "/tmp/hadoop-yarn/staging/$user/.staging/$job"
}

echo "== build and data"
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  bash java/build.sh >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; die "build failed"; }
fi
[[ -x $H ]] || die "$H is missing (build with java/build.sh)"
$H gen points --n 20000 --dim 8 --seed 7 --init 5 --files 3 --output "$WORK/data" >/dev/null
"$HADOOP" fs -rm -r -f -skipTrash "$HARP_HDFS_DIR" >/dev/null 2>&1
"$HADOOP" fs -mkdir -p "$HARP_HDFS_DIR" && "$HADOOP" fs -put "$WORK/data/points" "$HARP_HDFS_DIR/points" \
  && "$HADOOP" fs -put "$WORK/data/init.txt" "$HARP_HDFS_DIR/init.txt" || die "cannot put the data on HDFS"
N=$(nodes)
echo "cluster: $N usable nodes"

# Starts a long K-means job (W workers) in the background; sets JOBLOG and APP once it runs.
start_long() { # workers output [iterations [-D options…]]
  local w=$1 out=$2 iters=${3:-1000000}
  shift; shift; shift
  JOBLOG=$WORK/$out.log
  # shellcheck disable=SC2086
  (exec -a harp-scenario-client "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective \
    ${EXTRA_D:-} "$@" "$HARP_HDFS_DIR/points" "$HARP_HDFS_DIR/init.txt" "$HARP_HDFS_DIR/$out" "$iters" "$w" >"$JOBLOG" 2>&1) &
  CLIENT=$!
  CLIENTS+=("$CLIENT")
  APP=""
  for _ in $(seq 1 600); do
    APP=$(app_of "$JOBLOG")
    # Every worker has registered (the master's progress passes 10 %) and iterates.
    if [[ -n $APP ]] && [[ $(app_pids "$APP" 'harp.yarn.WorkerMain' | wc -l) -ge $w ]] \
      && app_json "$APP" | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["app"]["progress"] < 10)' 2>/dev/null; then
      sleep 2
      return 0
    fi
    sleep 0.2
  done
  return 1
}
wait_final() { # app → waits until its state is final; prints it
  local s
  for _ in $(seq 1 600); do
    s=$(state_of "$1")
    case $s in FINISHED/*|FAILED/*|KILLED/*) echo "$s"; return 0 ;; esac
    sleep 0.1
  done
  echo "$s"
}
no_success() { ! "$HADOOP" fs -test -e "$HARP_HDFS_DIR/$1/_SUCCESS" 2>/dev/null; }
staging_gone() { ! "$HADOOP" fs -test -e "$(staging_of "$1")" 2>/dev/null; }

scenario_kmeans() {
  local w=$1 t0; t0=$(now)
  if HARP_HDFS_DIR=$HARP_HDFS_DIR/e2e-$w scripts/yarn-e2e.sh "$w" 20000 8 5 5 >"$WORK/e2e-$w.log" 2>&1; then
    record "kmeans$w" 0 "$(since "$t0")" "$(grep -E 'largest relative|^workers per host:' "$WORK/e2e-$w.log" | tr '\n' ' ')"
  else
    record "kmeans$w" 1 "$(since "$t0")" "$(tail -n 3 "$WORK/e2e-$w.log" | tr '\n' ' ')"
  fi
}

scenario_gang() {
  local w=$((N + 1)) t0 rc; t0=$(now)
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective -Dharp.yarn.gang.timeout.ms=20000 \
    ${EXTRA_D:-} "$HARP_HDFS_DIR/points" "$HARP_HDFS_DIR/init.txt" "$HARP_HDFS_DIR/gang" 3 "$w" >"$WORK/gang.log" 2>&1
  rc=$?
  local why; why=$(grep -o "$w workers need [^(]*" "$WORK/gang.log" | head -n 1)
  [[ $rc -ne 0 && -n $why ]]; record gang $? "$(since "$t0")" "$why"
}

scenario_kill_worker() {
  start_long 3 killw || { record kill-worker 1 0 "the job did not start"; return; }
  local pid t0 st why
  pid=$(worker_pid "$APP" 1)
  t0=$(now); kill -9 "$pid"
  st=$(wait_final "$APP"); local secs; secs=$(since "$t0")
  wait "$CLIENT" 2>/dev/null
  why=$(diag_of "$APP")
  [[ $st == */FAILED && $why == "worker 1 "* ]] && awk -v s="$secs" 'BEGIN{exit !(s <= 5)}'
  record kill-worker $? "$secs" "$st: ${why:0:600}"
}

scenario_kill_master() {
  start_long 3 killm 1000000 -Dharp.yarn.am.max.attempts=1 || { record kill-master 1 0 "the job did not start"; return; }
  local t0 st left=1
  t0=$(now); kill -9 $(app_pids "$APP" 'harp.yarn.AppMaster')
  st=$(wait_final "$APP")
  for _ in $(seq 1 100); do
    left=$(app_pids "$APP" 'harp.yarn.WorkerMain' | wc -l); [[ $left -eq 0 ]] && break; sleep 0.1
  done
  local secs; secs=$(since "$t0")
  wait "$CLIENT" 2>/dev/null
  staging_gone "$APP"; local sg=$?
  [[ $left -eq 0 && $sg -eq 0 ]]; record kill-master $? "$secs" "$st, workers left: $left, staging removed: $([[ $sg -eq 0 ]] && echo yes || echo no)"
}

# Polls (at most $2 times, 0.2 s apart) until the first complete checkpoint under $1 is on HDFS
# and the application ($APP, read from $JOBLOG) is known, then kills its application master and
# waits for the application's final state. Sets FIRST (the checkpoint, relative to $1), ST,
# SECS (from the kill to the final state) and ATTEMPTS. Returns 1 if no checkpoint appeared.
kill_am_after_checkpoint() {
  local dir=$1 polls=$2 t0
  FIRST=""
  for _ in $(seq 1 "$polls"); do
    APP=$(app_of "$JOBLOG")
    FIRST=$("$HADOOP" fs -ls "$dir/*/manifest.json" 2>/dev/null | awk '/manifest.json/{print $NF}' | head -n 1)
    [[ -n $FIRST && -n $APP ]] && break
    sleep 0.2
  done
  [[ -n $FIRST ]] || return 1
  FIRST=${FIRST#"$dir"/}
  t0=$(now); kill -9 $(app_pids "$APP" 'harp.yarn.AppMaster')
  ST=$(wait_final "$APP"); SECS=$(since "$t0")
  wait "$CLIENT" 2>/dev/null
  ATTEMPTS=$(curl -sf --max-time 5 "http://$RM_WEB/ws/v1/cluster/apps/$APP/appattempts" \
    | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["appAttempts"]["appAttempt"]))' 2>/dev/null)
}

scenario_am_restart() {
  local w=3 iters=${AM_RESTART_ITERATIONS:-4000} every=${AM_RESTART_EVERY:-500} ref ours
  local ck=(-Dharp.checkpoint.every="$every")
  # The reference: the same job, uninterrupted.
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} "${ck[@]}" \
    "$HARP_HDFS_DIR/points" "$HARP_HDFS_DIR/init.txt" "$HARP_HDFS_DIR/amref" "$iters" "$w" >"$WORK/amref.log" 2>&1 \
    || { record am-restart 1 0 "the reference job failed: $(tail -n 2 "$WORK/amref.log" | tr '\n' ' ')"; return; }
  start_long "$w" amr "$iters" "${ck[@]}" || { record am-restart 1 0 "the job did not start"; return; }
  kill_am_after_checkpoint "$HARP_HDFS_DIR/amr/_checkpoints" 600 \
    || { record am-restart 1 0 "no checkpoint appeared under $HARP_HDFS_DIR/amr/_checkpoints"; return; }
  ref=$("$HADOOP" fs -cat "$HARP_HDFS_DIR/amref/centroids.txt" 2>/dev/null | md5sum | cut -c1-12)
  ours=$("$HADOOP" fs -cat "$HARP_HDFS_DIR/amr/centroids.txt" 2>/dev/null | md5sum | cut -c1-12)
  local resumed; resumed=$(grep -o '"resumed_from": *[0-9]*' <("$HADOOP" fs -cat "$HARP_HDFS_DIR/amr/summary.json" 2>/dev/null) | head -n 1)
  local ok=1
  [[ $ST == FINISHED/SUCCEEDED && $ATTEMPTS == 2 && $ref == "$ours" ]] && ! no_success amr && ok=0
  record am-restart $ok "$SECS" "killed once $FIRST was seen; $ST after $ATTEMPTS attempts; ${resumed:-resumed_from not in summary.json}; centroids md5 $ours vs uninterrupted $ref"
}

# An engine job run twice on the cluster: once uninterrupted (output $name-ref), once with
# `--checkpoint-every $every` (output $name-run) whose application master is killed (kill -9) once
# the first complete checkpoint is listed. Passes when YARN's attempt 2 resumes and succeeds and
# the part files of both runs are byte-identical.
#   am_restart_job NAME EVERY JOB ARGS…   (ARGS without --output)
am_restart_job() {
  local name=$1 every=$2 job=$3 ref ours; shift 3
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" "$job" -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} "$@" \
    --output "$HARP_HDFS_DIR/$name-ref" >"$WORK/$name-ref.log" 2>&1 \
    || { record "$name" 1 0 "the reference job failed: $(tail -n 2 "$WORK/$name-ref.log" | tr '\n' ' ')"; return; }
  JOBLOG=$WORK/$name-run.log
  # shellcheck disable=SC2086
  (exec -a harp-scenario-client "$HADOOP" jar "$JAR" "$job" -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} \
    "$@" --checkpoint-every "$every" --output "$HARP_HDFS_DIR/$name-run" >"$JOBLOG" 2>&1) &
  CLIENT=$!
  CLIENTS+=("$CLIENT")
  kill_am_after_checkpoint "$HARP_HDFS_DIR/$name-run/_checkpoints" 1500 \
    || { record "$name" 1 0 "no checkpoint appeared under $HARP_HDFS_DIR/$name-run/_checkpoints"; return; }
  ref=$("$HADOOP" fs -cat "$HARP_HDFS_DIR/$name-ref/part-*" 2>/dev/null | md5sum | cut -c1-12)
  ours=$("$HADOOP" fs -cat "$HARP_HDFS_DIR/$name-run/part-*" 2>/dev/null | md5sum | cut -c1-12)
  local ok=1
  [[ $ST == FINISHED/SUCCEEDED && $ATTEMPTS == 2 && $ref == "$ours" ]] && ! no_success "$name-run" && ok=0
  record "$name" $ok "$SECS" "killed once $FIRST was seen; $ST after $ATTEMPTS attempts; output md5 $ours vs uninterrupted $ref"
}

scenario_am_restart_pagerank() {
  python3 -c 'import random; r = random.Random(9); print("\n".join(f"{r.randrange(20000)} {r.randrange(20000)}" for _ in range(200000)))' \
    >"$WORK/edges.txt"
  "$HADOOP" fs -put -f "$WORK/edges.txt" "$HARP_HDFS_DIR/edges" || { record am-restart-pagerank 1 0 "cannot put the edges"; return; }
  am_restart_job am-restart-pagerank "${AM_RESTART_EVERY:-300}" pagerank --workers 3 \
    --input "$HARP_HDFS_DIR/edges" --iterations "${AM_RESTART_ITERATIONS:-3000}"
}

scenario_am_restart_mfsgd() {
  "$H" gen ratings --users 2000 --items 500 --ratings 60000 --seed 4 --output "$WORK/ratings.txt" \
    --test "$WORK/ratings-test.txt" >/dev/null || { record am-restart-mfsgd 1 0 "harp gen ratings failed"; return; }
  "$HADOOP" fs -put -f "$WORK/ratings.txt" "$WORK/ratings-test.txt" "$HARP_HDFS_DIR/" \
    || { record am-restart-mfsgd 1 0 "cannot put the ratings"; return; }
  am_restart_job am-restart-mfsgd "${AM_RESTART_EVERY:-40}" mfsgd --workers 3 --input "$HARP_HDFS_DIR/ratings.txt" \
    --test "$HARP_HDFS_DIR/ratings-test.txt" --epochs "${AM_RESTART_ITERATIONS:-400}"
}

scenario_am_restart_lda() {
  "$H" gen corpus --docs 600 --vocabulary 2000 --topics 10 --length 50 --seed 5 --output "$WORK/corpus.txt" \
    >/dev/null || { record am-restart-lda 1 0 "harp gen corpus failed"; return; }
  "$HADOOP" fs -put -f "$WORK/corpus.txt" "$HARP_HDFS_DIR/" || { record am-restart-lda 1 0 "cannot put the corpus"; return; }
  am_restart_job am-restart-lda "${AM_RESTART_EVERY:-20}" lda --workers 3 --input "$HARP_HDFS_DIR/corpus.txt" \
    --topics 10 --iterations "${AM_RESTART_ITERATIONS:-200}"
}

scenario_kill() { # name no-op-command kill-command
  local name=$1 noop=$2 cmd=$3
  local b0; b0=$(now); $noop >/dev/null 2>&1; local base; base=$(since "$b0")
  start_long 3 "$name" || { record "$name" 1 0 "the job did not start"; return; }
  local t0 st; t0=$(now)
  $cmd "${APP/application_/job_}" "$APP" >"$WORK/$name-cmd.log" 2>&1
  st=$(wait_final "$APP"); local secs; secs=$(since "$t0")
  wait "$CLIENT" 2>/dev/null
  sleep 1
  no_success "$name"; local ns=$?
  staging_gone "$APP"; local sg=$?
  local net; net=$(awk -v a="$secs" -v b="$base" 'BEGIN{printf "%.1f", a-b}')
  [[ $st == *KILLED* && $ns -eq 0 && $sg -eq 0 ]] && awk -v s="$net" 'BEGIN{exit !(s <= 5)}'
  record "$name" $? "$secs" "net $net s (the client alone: $base s); $st, committed: $([[ $ns -eq 0 ]] && echo no || echo yes), staging removed: $([[ $sg -eq 0 ]] && echo yes || echo no)"
}
mapred_kill() { "$MAPRED" job -kill "$1"; }
mapred_noop() { "$MAPRED" job -list; }
yarn_kill() { "$YARN" application -kill "$2"; }
yarn_noop() { "$YARN" application -list; }

scenario_bad() { # name input init expected-text [text the same line must hold too]
  local t0 rc; t0=$(now)
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} "$2" "$3" \
    "$HARP_HDFS_DIR/$1" 3 2 >"$WORK/$1.log" 2>&1
  rc=$?
  local line; line=$(grep -F "$4" "$WORK/$1.log" | grep -m 1 -F "${5:-$4}" | sed 's/.*due to: //; s/.*Exception: //')
  [[ $rc -ne 0 && -n $line ]]; record "$1" $? "$(since "$t0")" "${line:0:300}"
}

scenario_restarted_nm() {
  [[ -n ${RESTART_NM_CMD:-} ]] || { record restarted-nm 1 0 "RESTART_NM_CMD is not set"; return; }
  local t0; t0=$(now)
  bash -c "$RESTART_NM_CMD" >"$WORK/restart.log" 2>&1 || { record restarted-nm 1 "$(since "$t0")" "restart failed"; return; }
  local listed running hosts
  for _ in $(seq 1 60); do # until the new NodeId runs while the old one is still listed RUNNING
    running=$("$YARN" node -list 2>/dev/null | awk '/RUNNING/' | wc -l)
    hosts=$("$YARN" node -list 2>/dev/null | awk '/RUNNING/{sub(/:.*/, "", $1); print $1}' | sort -u | wc -l)
    [[ $running -gt $hosts ]] && break
    sleep 1
  done
  listed=$("$YARN" node -list -all 2>/dev/null | awk 'NR>2{print $1"="$2}' | tr '\n' ' ')
  [[ $running -gt $hosts ]] || { record restarted-nm 1 "$(since "$t0")" "no host listed twice as RUNNING: $listed"; return; }
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} "$HARP_HDFS_DIR/points" \
    "$HARP_HDFS_DIR/init.txt" "$HARP_HDFS_DIR/twice" 3 "$running" >"$WORK/twice.log" 2>&1
  local gang; gang=$(grep -o "$running workers need [^(]*" "$WORK/twice.log" | head -n 1)
  [[ -n $gang ]] || { record restarted-nm 1 "$(since "$t0")" "nodes: $listed; $running workers: $(grep -m 1 -E 'due to|Exception' "$WORK/twice.log")"; return; }
  if HARP_HDFS_DIR=$HARP_HDFS_DIR/e2e-nm scripts/yarn-e2e.sh "$N" 20000 8 5 5 >"$WORK/e2e-nm.log" 2>&1; then
    record restarted-nm 0 "$(since "$t0")" "nodes: $listed; $running workers: $gang; $N workers: $(grep -E '^workers per host:' "$WORK/e2e-nm.log" | tr '\n' ' ')"
  else
    record restarted-nm 1 "$(since "$t0")" "nodes: $listed; $(tail -n 3 "$WORK/e2e-nm.log" | tr '\n' ' ')"
  fi
}

scenario_subdir_input() {
  local t0 rc; t0=$(now)
  "$HADOOP" fs -mkdir -p "$HARP_HDFS_DIR/subdir-in/more" && "$HADOOP" fs -cp "$HARP_HDFS_DIR/points/*" "$HARP_HDFS_DIR/subdir-in/" \
    || { record subdir-input 1 0 "cannot prepare the input"; return; }
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} "$HARP_HDFS_DIR/subdir-in" \
    "$HARP_HDFS_DIR/init.txt" "$HARP_HDFS_DIR/subdir-out" 3 2 >"$WORK/subdir.log" 2>&1
  rc=$?
  local line; line=$(grep -m 1 -F "holds a subdirectory" "$WORK/subdir.log")
  [[ $rc -ne 0 && -n $line ]] && ! grep -q 'Submitted application' "$WORK/subdir.log"
  record subdir-input $? "$(since "$t0")" "${line:0:300}"
}

scenario_rerun_killed() {
  start_long 3 rerun 1000000 || { record rerun-killed 1 0 "the job did not start"; return; }
  "$YARN" application -kill "$APP" >"$WORK/rerun-kill.log" 2>&1
  wait_final "$APP" >/dev/null
  wait "$CLIENT" 2>/dev/null
  local left="no"; "$HADOOP" fs -test -e "$HARP_HDFS_DIR/rerun" 2>/dev/null && left="yes"
  local t0 rc; t0=$(now)
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} "$HARP_HDFS_DIR/points" \
    "$HARP_HDFS_DIR/init.txt" "$HARP_HDFS_DIR/rerun" 3 3 >"$WORK/rerun2.log" 2>&1
  rc=$?
  [[ $rc -eq 0 && $left == no ]]
  record rerun-killed $? "$(since "$t0")" "output directory left by the killed job: $left; the same command again: exit $rc $(grep -m 1 -o 'already exists' "$WORK/rerun2.log")"
}

scenario_kill_nm() { # name stop-worker(0/1)
  local name=$1 silent=$2 limit
  [[ -n ${NM_KILL_CMD:-} && -n ${NM_START_CMD:-} ]] || { record "$name" 1 0 "NM_KILL_CMD or NM_START_CMD is not set"; return; }
  local iters=${KILL_NM_ITERATIONS:-3000} timeout=${NM_SILENT_TIMEOUT_MS:-20000}
  if [[ $silent == 1 ]]; then
    start_long 3 "$name" 1000000 -Dharp.collective.timeout.ms="$timeout" || { record "$name" 1 0 "the job did not start"; return; }
  else
    start_long 3 "$name" "$iters" || { record "$name" 1 0 "the job did not start"; return; }
  fi
  local pid host t0 st secs why
  pid=$(worker_pid "$APP" 1); host=$(host_of_pid "$pid")
  [[ -n $host ]] || { record "$name" 1 0 "cannot find worker 1's node"; return; }
  t0=$(now)
  bash -c "$NM_KILL_CMD" nm-kill "$host" >"$WORK/$name-nm.log" 2>&1
  [[ $silent == 1 ]] && kill -STOP "$pid"
  st=$(wait_final "$APP"); secs=$(since "$t0")
  why=$(diag_of "$APP")
  [[ $silent == 1 ]] && kill -9 "$pid" 2>/dev/null
  wait "$CLIENT" 2>/dev/null
  bash -c "$NM_START_CMD" nm-start "$host" >>"$WORK/$name-nm.log" 2>&1
  if [[ $silent == 1 ]]; then
    limit=$((timeout / 1000 + 15))
    [[ $st == */FAILED && $why == "worker 1 "* ]] && awk -v s="$secs" -v l="$limit" 'BEGIN{exit !(s <= l)}'
  else
    [[ $st == FINISHED/SUCCEEDED ]] && ! no_success "$name" && awk -v s="$secs" 'BEGIN{exit !(s <= 120)}'
  fi
  record "$name" $? "$secs" "NodeManager of $host (worker 1) killed$([[ $silent == 1 ]] && echo ", worker 1 stopped"); $st ${why:0:400}"
}

scenario_master_node_lost() {
  [[ -n ${NODE_KILL_CMD:-} && -n ${NODE_START_CMD:-} ]] || { record master-node-lost 1 0 "NODE_KILL_CMD or NODE_START_CMD is not set"; return; }
  local iters=${AM_RESTART_ITERATIONS:-4000} every=${AM_RESTART_EVERY:-500}
  start_long 2 mnl "$iters" -Dharp.checkpoint.every="$every" || { record master-node-lost 1 0 "the job did not start"; return; }
  local am host t0 st secs attempts
  am=$(app_pids "$APP" 'harp.yarn.AppMaster' | head -n 1); host=$(host_of_pid "$am")
  [[ -n $host ]] || { record master-node-lost 1 0 "cannot find the master's node"; return; }
  t0=$(now)
  bash -c "$NODE_KILL_CMD" node-kill "$host" >"$WORK/mnl-node.log" 2>&1
  for _ in $(seq 1 9000); do # attempt 2 may come after YARN's expiry (10 minutes by default)
    st=$(state_of "$APP")
    case $st in FINISHED/*|FAILED/*|KILLED/*) break ;; esac
    sleep 0.2
  done
  secs=$(since "$t0")
  wait "$CLIENT" 2>/dev/null
  attempts=$(curl -sf --max-time 5 "http://$RM_WEB/ws/v1/cluster/apps/$APP/appattempts" \
    | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["appAttempts"]["appAttempt"]))' 2>/dev/null)
  local why; why=$(diag_of "$APP")
  bash -c "$NODE_START_CMD" node-start "$host" >>"$WORK/mnl-node.log" 2>&1
  [[ $st == FINISHED/SUCCEEDED && $attempts == 2 ]] && ! no_success mnl
  record master-node-lost $? "$secs" "all of $host killed (the master's node); $st after $attempts attempts ${why:0:300}"
}

list=("$@")
[[ ${#list[@]} -gt 0 ]] || list=(kmeans2 kmeans3 gang kill-worker kill-master am-restart am-restart-pagerank am-restart-mfsgd am-restart-lda mapred-kill yarn-kill bad-input bad-init subdir-input rerun-killed)
for s in "${list[@]}"; do
  case $s in
    kmeans2) scenario_kmeans 2 ;;
    kmeans3) scenario_kmeans 3 ;;
    gang) scenario_gang ;;
    kill-worker) scenario_kill_worker ;;
    kill-master) scenario_kill_master ;;
    am-restart) scenario_am_restart ;;
    am-restart-pagerank) scenario_am_restart_pagerank ;;
    am-restart-mfsgd) scenario_am_restart_mfsgd ;;
    am-restart-lda) scenario_am_restart_lda ;;
    mapred-kill) scenario_kill mapred-kill mapred_noop mapred_kill ;;
    yarn-kill) scenario_kill yarn-kill yarn_noop yarn_kill ;;
    bad-input) scenario_bad bad-input "$HARP_HDFS_DIR/no-such-points" "$HARP_HDFS_DIR/init.txt" "no-such-points" ;;
    restarted-nm) scenario_restarted_nm ;;
    bad-init) scenario_bad bad-init "$HARP_HDFS_DIR/points" "$HARP_HDFS_DIR/no-such-init.txt" "no-such-init.txt" "worker 0 (container" ;;
    subdir-input) scenario_subdir_input ;;
    rerun-killed) scenario_rerun_killed ;;
    kill-nm) scenario_kill_nm kill-nm 0 ;;
    kill-nm-silent) scenario_kill_nm kill-nm-silent 1 ;;
    master-node-lost) scenario_master_node_lost ;;
    *) die "unknown scenario $s" ;;
  esac
done
"$HADOOP" fs -rm -r -f -skipTrash "$HARP_HDFS_DIR" >/dev/null 2>&1
echo
printf '%s\n' "${results[@]}"
[[ $failed -eq 0 ]]
