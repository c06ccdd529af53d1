#!/usr/bin/env bash
# Failure and control scenarios of map-collective jobs on a REAL YARN + HDFS cluster whose
# NodeManagers run on this machine (one host, or hosts in network namespaces: the scenarios find
# worker and master processes with pgrep and kill them).
#   HADOOP_CONF_DIR=… scripts/yarn-scenarios.sh [SCENARIO…]      (default: all of them)
# Scenarios:
#   kmeans2 kmeans3  K-means with 2 / 3 workers, hdfs:// in and out, equal to harp kmeans (1e-9),
#                    at most one worker per host (scripts/yarn-e2e.sh)
#   gang             one worker more than the cluster has nodes: fails with the gang diagnostic
#   kill-worker      kill -9 of worker 1 mid-job: FAILED within 5 s, the diagnostic names worker 1
#   kill-master      kill -9 of the application master: workers gone, staging directory removed
#   mapred-kill      `mapred job -kill` (the cluster's own client, framework yarn): KILLED within
#                    5 s, nothing committed, staging directory removed
#   yarn-kill        `yarn application -kill`: the same
#   bad-input        an input path that does not exist: a clear error naming it
#   bad-init         a centroids file that does not exist: a clear error naming it
# Prints one line per scenario: name, PASS/FAIL, seconds, detail; exits non-zero if any failed.
# Environment: HDFS_DIR (default /tmp/harp-scenarios-$USER), EXTRA_D (more -D options).
set -uo pipefail
cd "$(dirname "$0")/.."
die() { echo "yarn-scenarios: $*" >&2; exit 2; }
[[ -n ${HADOOP_CONF_DIR:-} ]] || die "HADOOP_CONF_DIR is not set"
HADOOP=$(command -v hadoop || true)
[[ -n $HADOOP ]] || { [[ -n ${HADOOP_HOME:-} ]] && HADOOP=$HADOOP_HOME/bin/hadoop; }
[[ -x ${HADOOP:-} ]] || die "no Hadoop client on the PATH (or HADOOP_HOME)"
BIN=$(dirname "$HADOOP")
YARN=$BIN/yarn MAPRED=$BIN/mapred
HDFS_DIR=${HDFS_DIR:-/tmp/harp-scenarios-${USER:-harp}}
WORK=$(mktemp -d)
JAR=target/java/harp-rs-examples.jar
H=target/release/harp
trap 'pkill -f "harp-scenario-client" 2>/dev/null; rm -rf "$WORK"' EXIT
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
app_of() { sed -n 's/.*Submitted application \(application_[0-9_]*\).*/\1/p' "$1" | head -n 1; }
state_of() { "$YARN" application -status "$1" 2>/dev/null | awk -F' : ' '/^\t*State :/{s=$2} /Final-State/{f=$2} END{print s"/"f}'; }
staging_of() { # the job directory of application $1 on HDFS
  local job=${1/application_/job_} user=${HADOOP_USER_NAME:-${USER:-root}}
  echo "/tmp/hadoop-yarn/staging/$user/.staging/$job"
}

echo "== build and data"
bash java/build.sh >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; die "build failed"; }
$H gen points --n 20000 --dim 8 --seed 7 --init 5 --files 3 --output "$WORK/data" >/dev/null
"$HADOOP" fs -rm -r -f -skipTrash "$HDFS_DIR" >/dev/null 2>&1
"$HADOOP" fs -mkdir -p "$HDFS_DIR" && "$HADOOP" fs -put "$WORK/data/points" "$HDFS_DIR/points" \
  && "$HADOOP" fs -put "$WORK/data/init.txt" "$HDFS_DIR/init.txt" || die "cannot put the data on HDFS"
N=$(nodes)
echo "cluster: $N usable nodes"

# Starts a long K-means job (W workers) in the background; sets JOBLOG and APP once it runs.
start_long() {
  local w=$1 out=$2
  JOBLOG=$WORK/$out.log
  # shellcheck disable=SC2086
  (exec -a harp-scenario-client "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective \
    ${EXTRA_D:-} "$HDFS_DIR/points" "$HDFS_DIR/init.txt" "$HDFS_DIR/$out" 1000000 "$w" >"$JOBLOG" 2>&1) &
  CLIENT=$!
  APP=""
  for _ in $(seq 1 600); do
    APP=$(app_of "$JOBLOG")
    if [[ -n $APP ]] && [[ $(pgrep -fc 'harp.yarn.WorkerMain') -ge $w ]]; then
      sleep 3 # every worker has registered and iterates
      return 0
    fi
    sleep 0.2
  done
  return 1
}
wait_final() { # app → waits until its state is final; prints it
  local s
  for _ in $(seq 1 300); do
    s=$(state_of "$1")
    case $s in FINISHED/*|FAILED/*|KILLED/*) echo "$s"; return 0 ;; esac
    sleep 0.1
  done
  echo "$s"
}
no_success() { ! "$HADOOP" fs -test -e "$HDFS_DIR/$1/_SUCCESS" 2>/dev/null; }
staging_gone() { ! "$HADOOP" fs -test -e "$(staging_of "$1")" 2>/dev/null; }

scenario_kmeans() {
  local w=$1 t0; t0=$(now)
  if HDFS_DIR=$HDFS_DIR/e2e-$w scripts/yarn-e2e.sh "$w" 20000 8 5 5 >"$WORK/e2e-$w.log" 2>&1; then
    record "kmeans$w" 0 "$(since "$t0")" "$(grep -E 'largest relative|workers per host' "$WORK/e2e-$w.log" | tr '\n' ' ')"
  else
    record "kmeans$w" 1 "$(since "$t0")" "$(tail -n 3 "$WORK/e2e-$w.log" | tr '\n' ' ')"
  fi
}

scenario_gang() {
  local w=$((N + 1)) t0 rc; t0=$(now)
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective -Dharp.yarn.gang.timeout.ms=20000 \
    ${EXTRA_D:-} "$HDFS_DIR/points" "$HDFS_DIR/init.txt" "$HDFS_DIR/gang" 3 "$w" >"$WORK/gang.log" 2>&1
  rc=$?
  local why; why=$(grep -o "$w workers need [^(]*" "$WORK/gang.log" | head -n 1)
  [[ $rc -ne 0 && -n $why ]]; record gang $? "$(since "$t0")" "$why"
}

scenario_kill_worker() {
  start_long 3 killw || { record kill-worker 1 0 "the job did not start"; return; }
  local pid t0 st why
  pid=$(pgrep -f 'harp.yarn.WorkerMain job.xml 1 ' | head -n 1)
  t0=$(now); kill -9 "$pid"
  st=$(wait_final "$APP"); local secs; secs=$(since "$t0")
  wait "$CLIENT" 2>/dev/null
  why=$("$YARN" application -status "$APP" 2>/dev/null | sed -n 's/^\t*Diagnostics : //p' | head -n 1)
  [[ $st == */FAILED && $why == "worker 1 "* ]] && awk -v s="$secs" 'BEGIN{exit !(s <= 5)}'
  record kill-worker $? "$secs" "$st: ${why:0:160}"
}

scenario_kill_master() {
  start_long 3 killm || { record kill-master 1 0 "the job did not start"; return; }
  local t0 st left=1
  t0=$(now); pkill -9 -f 'harp.yarn.AppMaster'
  st=$(wait_final "$APP")
  for _ in $(seq 1 100); do
    left=$(pgrep -fc 'harp.yarn.WorkerMain'); [[ $left -eq 0 ]] && break; sleep 0.1
  done
  local secs; secs=$(since "$t0")
  wait "$CLIENT" 2>/dev/null
  staging_gone "$APP"; local sg=$?
  [[ $left -eq 0 && $sg -eq 0 ]]; record kill-master $? "$secs" "$st, workers left: $left, staging removed: $([[ $sg -eq 0 ]] && echo yes || echo no)"
}

scenario_kill() { # name command…
  local name=$1; shift
  start_long 3 "$name" || { record "$name" 1 0 "the job did not start"; return; }
  local t0 st; t0=$(now)
  "$@" "${APP/application_/job_}" "$APP" >"$WORK/$name-cmd.log" 2>&1
  st=$(wait_final "$APP"); local secs; secs=$(since "$t0")
  wait "$CLIENT" 2>/dev/null
  sleep 1
  no_success "$name"; local ns=$?
  staging_gone "$APP"; local sg=$?
  [[ $st == *KILLED* && $ns -eq 0 && $sg -eq 0 ]] && awk -v s="$secs" 'BEGIN{exit !(s <= 5)}'
  record "$name" $? "$secs" "$st, committed: $([[ $ns -eq 0 ]] && echo no || echo yes), staging removed: $([[ $sg -eq 0 ]] && echo yes || echo no)"
}
mapred_kill() { "$MAPRED" job -kill "$1"; }
yarn_kill() { "$YARN" application -kill "$2"; }

scenario_bad() { # name input init expected-text
  local t0 rc; t0=$(now)
  # shellcheck disable=SC2086
  "$HADOOP" jar "$JAR" kmeans -Dmapreduce.framework.name=map-collective ${EXTRA_D:-} "$2" "$3" \
    "$HDFS_DIR/$1" 3 2 >"$WORK/$1.log" 2>&1
  rc=$?
  local line; line=$(grep -m 1 -F "$4" "$WORK/$1.log")
  [[ $rc -ne 0 && -n $line ]]; record "$1" $? "$(since "$t0")" "${line:0:200}"
}

list=("$@")
[[ ${#list[@]} -gt 0 ]] || list=(kmeans2 kmeans3 gang kill-worker kill-master mapred-kill yarn-kill bad-input bad-init)
for s in "${list[@]}"; do
  case $s in
    kmeans2) scenario_kmeans 2 ;;
    kmeans3) scenario_kmeans 3 ;;
    gang) scenario_gang ;;
    kill-worker) scenario_kill_worker ;;
    kill-master) scenario_kill_master ;;
    mapred-kill) scenario_kill mapred-kill mapred_kill ;;
    yarn-kill) scenario_kill yarn-kill yarn_kill ;;
    bad-input) scenario_bad bad-input "$HDFS_DIR/no-such-points" "$HDFS_DIR/init.txt" "no-such-points" ;;
    bad-init) scenario_bad bad-init "$HDFS_DIR/points" "$HDFS_DIR/no-such-init.txt" "no-such-init.txt" ;;
    *) die "unknown scenario $s" ;;
  esac
done
"$HADOOP" fs -rm -r -f -skipTrash "$HDFS_DIR" >/dev/null 2>&1
echo
printf '%s\n' "${results[@]}"
[[ $failed -eq 0 ]]
