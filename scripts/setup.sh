#!/usr/bin/env bash
# Installs what the Java side needs on a fresh machine (idempotent):
#   * Debian packages: JUnit 5 console launcher, slf4j and commons-logging (Hadoop's runtime needs)
#   * the shaded Hadoop 3.5.0 client jars, taken from PyPI's pyspark 4.3.0 sdist (no Maven
#     Central here), checked against their SHA-256 and cached outside the repository.
# Prints the cache directory on its last line. Override the cache with HADOOP_JARS=DIR.
set -euo pipefail

need=()
for p in junit5 libslf4j-java libcommons-logging-java; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

HJ=${HADOOP_JARS:-${XDG_CACHE_HOME:-$HOME/.cache}/harp-rs/hadoop-3.5.0}
API=$HJ/hadoop-client-api-3.5.0.jar
RT=$HJ/hadoop-client-runtime-3.5.0.jar
sums() {
  cat <<'SUMS'
cc59446ec9ebaceae56fdb8d8c21477766dc5d426325642151c796bec5c4e6b7  hadoop-client-api-3.5.0.jar
b7db3e60c5df1cd37c2995b3e0142e57487260706834e5325bbe0a5e683eedf1  hadoop-client-runtime-3.5.0.jar
SUMS
}
if [[ ! -s $API || ! -s $RT ]] || ! (cd "$HJ" && sums | sha256sum -c --quiet >/dev/null 2>&1); then
  mkdir -p "$HJ/dl"
  if [[ ! -s $HJ/dl/pyspark-4.3.0.tar.gz ]]; then
    echo "setup: downloading the pyspark 4.3.0 sdist (455 MB) for the Hadoop client jars" >&2
    python3 -m pip download --quiet --no-deps --no-binary=:all: pyspark==4.3.0 -d "$HJ/dl" >&2
  fi
  tar -xzf "$HJ/dl/pyspark-4.3.0.tar.gz" -C "$HJ" --occurrence=1 --strip-components=3 \
    pyspark-4.3.0/deps/jars/hadoop-client-api-3.5.0.jar pyspark-4.3.0/deps/jars/hadoop-client-runtime-3.5.0.jar
  (cd "$HJ" && sums | sha256sum -c --quiet) || { echo "setup: checksum mismatch for the Hadoop jars in $HJ" >&2; exit 1; }
  rm -rf "$HJ/dl"
fi
echo "$HJ"
