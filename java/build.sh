#!/usr/bin/env bash
# Builds the Java side with plain javac/jar (no Maven Central here):
#   target/java/harp-rs.jar           the API classes + the native libraries of every platform
#                                     (/native/linux-x86_64/ and /native/linux-aarch64/libharp_jni.so,
#                                     glibc 2.17, stripped: scripts/native.sh)
#   target/java/harp-rs-examples.jar  the same plus the examples (Main-Class: harp.examples.Driver)
#   target/java/test-classes/         the JUnit 5 tests (java/ and yarn-appmaster/)
#   target/java/classpath-3.3.4, classpath-3.5.0   the run-time classpath with either Hadoop client
#                                     (classpath: the 3.3.4 one)
# HARP_NATIVE=host puts only this machine's own build (target/release) in the jars, as
# linux-x86_64: quicker while developing, not for shipping (scripts/check-dist.sh rejects it).
# java/src/main is compiled alone first (it must not need yarn-appmaster/), then
# yarn-appmaster/src/main against it; both go into harp-rs.jar (YARN plugs in through its
# META-INF/services/harp.mapred.ClusterSubmitter). harp/engine-options.properties is the
# engine's option table for the Java side, written by `harp options --properties`.
# Needs scripts/setup.sh (Hadoop client jars, JUnit); prints the classpath file it wrote.
# All classes are Java 8 bytecode (--release 8); the tests, which run on Java 11 and 17, Java 11.
set -euo pipefail
cd "$(dirname "$0")/.."
HC=$(scripts/setup.sh | tail -n 1)
# Compiled against the Hadoop 3.3 client API for Java 8 (class major 52): javac itself refuses any
# newer Java API, and the jars run unchanged with the 3.3.x and 3.5.x clients on Java 8 to 25.
API=$HC/hadoop-3.3.4/hadoop-client-api-3.3.4.jar
LOGGING=/usr/share/java/slf4j-api.jar:/usr/share/java/commons-logging.jar
JUNIT=/usr/share/java/junit-jupiter-api.jar:/usr/share/java/apiguardian-api.jar:/usr/share/java/opentest4j.jar
cargo build --release -q -p harp-cli
if [[ ${HARP_NATIVE:-all} == host ]]; then
  cargo build --release -q -p harp-jni
  mkdir -p target/native-host/linux-x86_64
  strip -o target/native-host/linux-x86_64/libharp_jni.so target/release/libharp_jni.so
  NATIVE=target/native-host PLATFORMS=(linux-x86_64)
else
  NATIVE=$(scripts/native.sh | tail -n 1) PLATFORMS=(linux-x86_64 linux-aarch64)
fi
B=target/java
rm -rf "$B/classes" "$B/yarn-classes" "$B/examples-classes" "$B/test-classes"
mkdir -p "$B/classes/harp" "$B/yarn-classes" "$B/examples-classes" "$B/test-classes"
JAVAC=(javac --release 8 -Xlint:all,-serial,-options -Werror)
"${JAVAC[@]}" -d "$B/classes" -cp "$API" $(find java/src/main/java -name '*.java')
"${JAVAC[@]}" -d "$B/yarn-classes" -cp "$API:$B/classes" $(find yarn-appmaster/src/main/java -name '*.java')
cp -r java/src/main/resources/. "$B/classes/"
target/release/harp options --properties > "$B/classes/harp/engine-options.properties"
cp -r "$B/yarn-classes/." yarn-appmaster/src/main/resources/. "$B/classes/"
for p in "${PLATFORMS[@]}"; do
  mkdir -p "$B/classes/native/$p"
  cp "$NATIVE/$p/libharp_jni.so" "$B/classes/native/$p/"
done
jar --create --file "$B/harp-rs.jar" -C "$B/classes" .
"${JAVAC[@]}" -d "$B/examples-classes" -cp "$API:$B/classes" $(find java/examples -name '*.java')
cp -r "$B/classes/." "$B/examples-classes/"
jar --create --file "$B/harp-rs-examples.jar" --main-class harp.examples.Driver -C "$B/examples-classes" .
# The tests run on Java 11 and 17 (scripts/test.sh).
javac --release 11 -d "$B/test-classes" -cp "$API:$B/harp-rs-examples.jar:$JUNIT" \
  $(find java/src/test/java yarn-appmaster/src/test/java -name '*.java')
for v in 3.3.4 3.5.0; do
  echo "$B/harp-rs-examples.jar:$HC/hadoop-$v/hadoop-client-api-$v.jar:$HC/hadoop-$v/hadoop-client-runtime-$v.jar:$LOGGING" \
    > "$B/classpath-$v"
done
cp "$B/classpath-3.3.4" "$B/classpath"
echo "$B/classpath"
