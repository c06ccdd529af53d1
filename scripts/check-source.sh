#!/usr/bin/env bash
# The source gates CI runs: formatting and lints, one PASS/FAIL line each.
#   scripts/check-source.sh
# rustfmt and clippy come with rustup's default profile; a minimal toolchain gets them here.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0

for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$c" >/dev/null 2>&1 || true
  fi
done

gate() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then
    echo "PASS $name"
  else
    printf '%s\n' "$out" | tail -n 40
    echo "FAIL $name"
    status=1
  fi
}

gate "cargo fmt --check" cargo fmt --all -- --check
gate "cargo clippy --workspace --all-targets -D warnings" \
  cargo clippy --workspace --all-targets --release -- -D warnings
exit $status
