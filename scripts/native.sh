#!/usr/bin/env bash
# Builds the native code we ship for every supported platform, against glibc 2.17 (CentOS 7,
# RHEL 7/8, Amazon Linux 2, Ubuntu 18.04 and newer all load it):
#   scripts/native.sh [PLATFORM…]      (default: linux-x86_64 linux-aarch64)
# with cargo-zigbuild and zig as the linker (both from PyPI: ziglang, cargo-zigbuild; the Rust
# standard library of each target from rustup). Writes, per platform,
#   target/native/PLATFORM/libharp_jni.so     the JNI library, stripped (what the jar carries)
#   target/native/PLATFORM/harp               the harp tool, stripped
#   target/native/PLATFORM/debug/*.debug      their debug info (linked by .gnu_debuglink)
# Installs what it needs (idempotent). Prints the output directory on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

PLATFORMS=("$@")
((${#PLATFORMS[@]})) || PLATFORMS=(linux-x86_64 linux-aarch64)
GLIBC=2.17

triple() {
  case $1 in
    linux-x86_64) echo x86_64-unknown-linux-gnu ;;
    linux-aarch64) echo aarch64-unknown-linux-gnu ;;
    *) echo "native: unknown platform $1 (linux-x86_64, linux-aarch64)" >&2; exit 2 ;;
  esac
}
objcopy_for() {
  case $1 in
    linux-x86_64) echo x86_64-linux-gnu-objcopy ;;
    linux-aarch64) echo aarch64-linux-gnu-objcopy ;;
  esac
}

# Tools: zig and cargo-zigbuild from PyPI, objcopy for each target from Debian's binutils.
if ! command -v cargo-zigbuild >/dev/null 2>&1 || ! python3 -m ziglang version >/dev/null 2>&1; then
  echo "native: installing ziglang and cargo-zigbuild (PyPI)" >&2
  python3 -m pip install --quiet --disable-pip-version-check ziglang==0.17.1 cargo-zigbuild==0.24.1 >&2
  hash -r
fi
need=()
for p in "${PLATFORMS[@]}"; do
  command -v "$(objcopy_for "$p")" >/dev/null 2>&1 || need+=("binutils-${p#linux-}-linux-gnu")
done
need=("${need[@]/binutils-x86_64-linux-gnu/binutils-x86-64-linux-gnu}")
if ((${#need[@]})); then
  echo "native: installing ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
installed=$(rustup target list --installed)
for p in "${PLATFORMS[@]}"; do
  t=$(triple "$p")
  grep -qx "$t" <<<"$installed" || { echo "native: adding the Rust target $t" >&2; rustup target add "$t" >&2; }
done

OUT=target/native
for p in "${PLATFORMS[@]}"; do
  t=$(triple "$p")
  echo "native: building $p (glibc $GLIBC)" >&2
  cargo zigbuild --release -q --target "$t.$GLIBC" -p harp-jni -p harp-cli >&2
  mkdir -p "$OUT/$p/debug"
  oc=$(objcopy_for "$p")
  for f in libharp_jni.so harp; do
    src=target/$t/release/$f
    "$oc" --only-keep-debug "$src" "$OUT/$p/debug/$f.debug"
    "$oc" --strip-all --add-gnu-debuglink="$OUT/$p/debug/$f.debug" "$src" "$OUT/$p/$f.tmp"
    mv "$OUT/$p/$f.tmp" "$OUT/$p/$f"
  done
done
echo "$OUT"
