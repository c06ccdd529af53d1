#!/usr/bin/env bash
# Runs every test of the project on a fresh machine and ends with one line `N passed, M failed`.
#   scripts/test.sh
# Rust: unit tests of the engine and CLI, and the multi-process tests in tests/ (real worker
# processes on loopback sockets). Java: JUnit 5 tests of the Hadoop API through JNI and
# LocalJobRunner (java/build.sh installs what they need: scripts/setup.sh). Exits non-zero if
# anything fails or does not build.
set -uo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=never
passed=0
failed=0
status=0

log=$(mktemp)
trap 'rm -f "$log"' EXIT

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

echo
echo "== Java (JUnit 5 through LocalJobRunner) =="
if java/build.sh > "$log" 2>&1; then
  CP="$(cat target/java/classpath):target/java/test-classes:/usr/share/java/junit-platform-console-standalone.jar"
  mkdir -p target/java/tmp
  java -Djava.io.tmpdir="$PWD/target/java/tmp" -Dharp.bin="$PWD/target/release/harp" -cp "$CP" \
    org.junit.platform.console.ConsoleLauncher --scan-classpath target/java/test-classes \
    --disable-banner --disable-ansi-colors --details=tree 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  jp=$(sed -n 's/^\[ *\([0-9]*\) tests successful *\]$/\1/p' "$log" | tail -n 1)
  jf=$(sed -n 's/^\[ *\([0-9]*\) tests failed *\]$/\1/p' "$log" | tail -n 1)
  passed=$((passed + ${jp:-0})); failed=$((failed + ${jf:-0}))
  if [ "$rc" -ne 0 ]; then
    status=1
    if [ "${jf:-0}" -eq 0 ]; then failed=$((failed + 1)); fi
  fi
else
  cat "$log"
  echo "Java build failed"
  status=1; failed=$((failed + 1))
fi

echo
echo "$passed passed, $failed failed"
exit $status
