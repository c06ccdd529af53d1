#!/usr/bin/env bash
# Makes the release bundle:
#   scripts/package.sh            builds (java/build.sh: jars and the native code of every platform)
#   SKIP_BUILD=1 scripts/package.sh   packs what is built
# Writes target/dist/harp-rs-VERSION-linux.tar.gz, and prints its path on the last line:
#   harp-rs-VERSION/
#     lib/harp-rs.jar               the Hadoop API, the YARN client protocol and application master,
#                                   and libharp_jni.so for linux-x86_64 and linux-aarch64 (glibc 2.17+)
#     lib/harp-rs-examples.jar      the same plus the examples (`hadoop jar … kmeans|wordcount|…`)
#     bin/linux-x86_64/harp, bin/linux-aarch64/harp   the harp tool (glibc 2.17+)
#     docs/                         README.md and the user manuals (YARN, Java API, applications)
#     SHA256SUMS                    of every other file (`sha256sum -c SHA256SUMS`)
# and target/dist/harp-rs-VERSION-linux.tar.gz.sha256. Debug info stays in target/native/*/debug/.
# The bundle is checked before it is written: every sum verifies, every binary is the
# platform's, and `bin/<this platform>/harp --version` prints VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[[ -n $VERSION ]] || { echo "package: no version in Cargo.toml [workspace.package]" >&2; exit 1; }
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  java/build.sh >&2
fi
for f in target/java/harp-rs.jar target/java/harp-rs-examples.jar target/native/linux-x86_64/harp \
  target/native/linux-aarch64/harp; do
  [[ -f $f ]] || { echo "package: $f is missing (build with java/build.sh)" >&2; exit 1; }
done
NAME=harp-rs-$VERSION
OUT=target/dist
STAGE=$OUT/stage
rm -rf "$STAGE" && mkdir -p "$STAGE/$NAME"/{lib,bin/linux-x86_64,bin/linux-aarch64,docs}
D=$STAGE/$NAME
cp target/java/harp-rs.jar target/java/harp-rs-examples.jar "$D/lib/"
cp target/native/linux-x86_64/harp "$D/bin/linux-x86_64/"
cp target/native/linux-aarch64/harp "$D/bin/linux-aarch64/"
cp README.md "$D/"
cp docs/platforms.md docs/yarn.md docs/java-guide.md docs/apps.md docs/apps-graph.md docs/apps-mds-layout.md docs/kmeans.md \
  docs/jni-contract.md "$D/docs/"
(cd "$D" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)

# Check before writing: sums, machines, and the tool of this platform runs.
(cd "$D" && sha256sum -c --quiet SHA256SUMS) || { echo "package: SHA256SUMS does not verify" >&2; exit 1; }
readelf -h "$D/bin/linux-x86_64/harp" | grep -q 'X86-64' || { echo "package: bin/linux-x86_64/harp is not x86-64" >&2; exit 1; }
readelf -h "$D/bin/linux-aarch64/harp" | grep -q 'AArch64' || { echo "package: bin/linux-aarch64/harp is not AArch64" >&2; exit 1; }
here=linux-$(uname -m)
if [[ -x $D/bin/$here/harp ]]; then
  v=$("$D/bin/$here/harp" --version)
  [[ $v == "harp $VERSION" ]] || { echo "package: bin/$here/harp --version says '$v', not 'harp $VERSION'" >&2; exit 1; }
fi

TAR=$OUT/$NAME-linux.tar.gz
# Reproducible: fixed order, owner and times.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='@0' -C "$STAGE" -cf - "$NAME" | gzip -n -9 >"$TAR"
(cd "$OUT" && sha256sum "$(basename "$TAR")" >"$(basename "$TAR").sha256")
rm -rf "$STAGE"
echo "package: $(du -h "$TAR" | cut -f1) $(cut -d' ' -f1 "$TAR.sha256")" >&2
echo "$TAR"
