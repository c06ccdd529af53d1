#!/usr/bin/env bash
# Builds the Java side with plain javac/jar (no Maven Central here):
#   target/java/harp-rs.jar           the API classes + the native library (/native/libharp_jni.so)
#   target/java/harp-rs-examples.jar  the same plus the examples (Main-Class: harp.examples.Driver)
#   target/java/test-classes/         the JUnit 5 tests (java/ and yarn-appmaster/)
# java/src/main is compiled alone first (it must not need yarn-appmaster/), then
# yarn-appmaster/src/main against it; both go into harp-rs.jar (YARN plugs in through its
# META-INF/services/harp.mapred.ClusterSubmitter). harp/engine-options.properties is the
# engine's option table for the Java side, written by `harp options --properties`.
# Needs scripts/setup.sh (Hadoop client jars, JUnit); prints the classpath file it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
HJ=$(scripts/setup.sh | tail -n 1)
API=$HJ/hadoop-client-api-3.5.0.jar
RT=$HJ/hadoop-client-runtime-3.5.0.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/commons-logging.jar
JUNIT=/usr/share/java/junit-jupiter-api.jar:/usr/share/java/apiguardian-api.jar:/usr/share/java/opentest4j.jar
cargo build --release -q -p harp-jni -p harp-cli
B=target/java
rm -rf "$B/classes" "$B/yarn-classes" "$B/examples-classes" "$B/test-classes"
mkdir -p "$B/classes/native" "$B/classes/harp" "$B/yarn-classes" "$B/examples-classes" "$B/test-classes"
JAVAC=(javac --release 17 -Xlint:all,-serial,-options -Werror)
"${JAVAC[@]}" -d "$B/classes" -cp "$API" $(find java/src/main/java -name '*.java')
"${JAVAC[@]}" -d "$B/yarn-classes" -cp "$API:$B/classes" $(find yarn-appmaster/src/main/java -name '*.java')
cp -r java/src/main/resources/. "$B/classes/"
target/release/harp options --properties > "$B/classes/harp/engine-options.properties"
cp -r "$B/yarn-classes/." yarn-appmaster/src/main/resources/. "$B/classes/"
cp target/release/libharp_jni.so "$B/classes/native/"
jar --create --file "$B/harp-rs.jar" -C "$B/classes" .
javac --release 17 -Xlint:all,-serial,-options -Werror -d "$B/examples-classes" -cp "$API:$B/classes" $(find java/examples -name '*.java')
cp -r "$B/classes/." "$B/examples-classes/"
jar --create --file "$B/harp-rs-examples.jar" --main-class harp.examples.Driver -C "$B/examples-classes" .
javac --release 17 -d "$B/test-classes" -cp "$API:$B/harp-rs-examples.jar:$JUNIT" \
  $(find java/src/test/java yarn-appmaster/src/test/java -name '*.java')
echo "$B/harp-rs-examples.jar:$API:$RT" > "$B/classpath"
echo "$B/classpath"
